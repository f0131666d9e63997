"""How the step model's cost grows with GPUs, layers, micro-batches and pipeline stages (docs/training.md).

    python examples/training/step_cost_growth.py

A Llama-3-70B-like step (tp 8 with SP, distributed optimizer, overlapped DP); each line: what was varied, the wall
seconds of one simulated step (building the cluster included), engine events and collectives run or replayed.
Wall times depend on the machine's load: compare lines of one run.
"""
import json
import time

from simcomm.hardware import build_cluster
from simcomm.parallel import StepModel, TrainingConfig, build_layout, model_preset


def one(nodes, layers=80, m=32, pp=4):
    t0 = time.perf_counter()
    cluster = build_cluster("hgx-h100", nodes=nodes)
    dp = nodes * 8 // (8 * pp)
    model = model_preset("llama3-70b", num_layers=layers)
    cfg = TrainingConfig(global_batch_size=m * dp, tensor_model_parallel_size=8, pipeline_model_parallel_size=pp,
                         sequence_parallel=True, use_distributed_optimizer=True, overlap_grad_reduce=True,
                         overlap_param_gather=True)
    sim = StepModel(build_layout(model, cfg, cluster.num_ranks), cluster, check_memory=False)
    res = sim.run()
    return {"gpus": nodes * 8, "layers": layers, "microbatches": m, "pp": pp, "wall": time.perf_counter() - t0,
            "events": sim.session.stats()["events"], "step_time": res.step_time, **res.traffic}


if __name__ == "__main__":
    for nodes in (8, 32, 128, 512, 2048):
        print("gpus", json.dumps(one(nodes)), flush=True)
    for layers in (20, 40, 80, 160):
        print("layers", json.dumps(one(128, layers=layers)), flush=True)
    for m in (8, 16, 32, 64, 128):
        print("microbatches", json.dumps(one(128, m=m)), flush=True)
    for pp in (2, 4, 8, 16):
        print("stages", json.dumps(one(128, pp=pp)), flush=True)
