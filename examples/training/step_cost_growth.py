"""How the step model's cost grows with GPUs, layers, micro-batches and pipeline stages (docs/training.md).

    python examples/training/step_cost_growth.py           # docs/training.md's sweep (about a minute)
    python examples/training/step_cost_growth.py --quick   # a reduced sweep on 32-64 GPUs (seconds)

A Llama-3-70B-like step (tp 8 with SP, distributed optimizer, overlapped DP); each line: what was varied, the wall
seconds of one simulated step (building the cluster included), engine events and collectives run or replayed.
Wall times depend on the machine's load: compare lines of one run.
"""
import json
import sys
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
            "events": res.simulation.stats()["events"], "step_time": res.step_time, **res.traffic}


# what each sweep varies, and the fixed point (nodes, layers, micro-batches, stages) it varies it around
SWEEPS = {
    "full": ({"gpus": (8, 32, 128, 512, 2048), "layers": (20, 40, 80, 160), "microbatches": (8, 16, 32, 64, 128),
              "stages": (2, 4, 8, 16)}, dict(nodes=128, layers=80, m=32, pp=4)),
    "quick": ({"gpus": (4, 8), "layers": (8, 16), "microbatches": (4, 8), "stages": (2, 4)},
              dict(nodes=4, layers=8, m=4, pp=4)),
}
ARG = {"gpus": "nodes", "layers": "layers", "microbatches": "m", "stages": "pp"}


def main(argv) -> int:
    values, base = SWEEPS["quick" if "--quick" in argv else "full"]
    for what, xs in values.items():
        for x in xs:
            print(what, json.dumps(one(**{**base, ARG[what]: x})), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
