"""simcomm launch: a script behaves as in its own process on the simulated cluster, and nothing leaks out."""
import os
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch
import torch.distributed as tdist

from simcomm.backends.launch import launch
from simcomm.backends.placement import torchrun_cluster
from simcomm.errors import DeadlockError, DistError, RankFailed


def script(tmp_path, body: str, name="prog.py"):
    path = tmp_path / name
    path.write_text("import os, sys, time\nimport torch\nimport torch.distributed as dist\n"
                    + textwrap.dedent(body))
    return path


def run(tmp_path, body, nproc=2, cluster="hgx-h100", args=(), **kw):
    return launch(script(tmp_path, body), list(args), nproc_per_node=nproc, cluster=cluster, **kw)


def test_environment_rank_and_backend_per_rank(tmp_path, capsys):
    result = run(tmp_path, """
        dist.init_process_group("nccl")
        os.environ["MINE"] = os.environ["RANK"]  # a rank's writes stay in its own environment
        dist.barrier()
        print(os.environ["RANK"], os.getenv("LOCAL_RANK"), os.environ["WORLD_SIZE"], os.environ["MINE"],
              dist.get_backend(), dist.get_rank(), sys.argv[1:], __name__)
    """, nproc=3, args=["--x", "1"])
    lines = sorted(capsys.readouterr().out.splitlines())
    assert lines == [f"{r} {r} 3 {r} nccl {r} ['--x', '1'] __main__" for r in range(3)]
    assert [w.nprocs for w in result.worlds] == [3] and result.ok


def test_everything_is_restored_afterwards(tmp_path):
    def state():
        return (os.environ, time.sleep, time.time, tdist.all_reduce, tdist.init_process_group, torch.device,
                torch.cuda.is_available, sys.modules["__main__"], list(sys.argv), list(sys.path),
                tdist.distributed_c10d._get_default_group, torch.nn.parallel.distributed._get_default_group,
                torch.nn.parallel.DistributedDataParallel.__init__, torch.get_num_threads(),
                tdist.distributed_c10d.init_process_group, tdist.device_mesh.init_device_mesh,
                tdist.device_mesh.DeviceMesh, tdist.init_device_mesh, tdist.DeviceMesh)
    before = state()
    run(tmp_path, "dist.init_process_group('gloo')\ndist.all_reduce(torch.ones(2))\n", cluster="cpu-host")
    after = state()
    assert all(a is b or a == b for a, b in zip(before, after))
    assert "RANK" not in os.environ and not torch.cuda.is_available()


def test_sleep_and_clock_are_simulated(tmp_path, capsys):
    t0 = time.monotonic()
    result = run(tmp_path, """
        dist.init_process_group("nccl")
        start = time.time()
        time.sleep(5.0 * dist.get_rank())
        dist.barrier()
        print(round(time.time() - start, 3), round(time.perf_counter() - time.perf_counter(), 6))
    """)
    assert time.monotonic() - t0 < 10  # nobody really slept 5 s
    assert sorted(capsys.readouterr().out.split()) == ["0.0", "0.0", "5.0", "5.0"]
    assert 5.0 < result.worlds[0].elapsed < 5.001


def test_cuda_calls_map_to_the_simulated_gpus(tmp_path, capsys):
    run(tmp_path, """
        dist.init_process_group("nccl")
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
        d = torch.device(torch.cuda.current_device())
        x = torch.ones(2).cuda() + torch.ones(2, device="cuda") + torch.ones(2).to(d) + torch.ones(2, device=d)
        dist.all_reduce(x)
        print(torch.cuda.is_available(), torch.cuda.device_count(), torch.cuda.current_device(), d,
              torch.cuda.get_device_name(), x.tolist())
    """)
    out = sorted(capsys.readouterr().out.splitlines())
    assert out == [f"True 8 {r} cuda:{r} H100-SXM5-80GB [8.0, 8.0]" for r in range(2)]


def test_meta_tensors_are_size_only(tmp_path, capsys):
    result = run(tmp_path, """
        dist.init_process_group("nccl")
        big = torch.empty(1 << 30, device="cuda")  # 4 GiB each, never allocated with --cuda-as meta
        dist.all_reduce(big)
        print(big.device, big.shape[0])
    """, nproc=8, cuda_as="meta")
    assert capsys.readouterr().out.split() == ["meta", str(1 << 30)] * 8
    busbw = 2 * 7 / 8 * (4 << 30) / result.worlds[0].elapsed
    assert 200e9 < busbw < 700e9  # an NVSwitch all-reduce of 4 GiB, not zero time


def test_compute_is_charged_at_the_flop_rate(tmp_path):
    body = """
        dist.init_process_group("gloo")
        a = torch.ones(64, 64)
        for _ in range(10):
            a = a @ a / 64
        dist.barrier()
    """
    plain = run(tmp_path, body, cluster="cpu-host").worlds[0].elapsed
    counted = run(tmp_path, body, cluster="cpu-host", count_flops=True, flop_rate=1e9).worlds[0].elapsed
    assert counted - plain == pytest.approx(10 * 2 * 64 ** 3 / 1e9, rel=1e-9)


def test_random_generators_are_per_rank(tmp_path, capsys):
    run(tmp_path, """
        dist.init_process_group("gloo")
        torch.manual_seed(dist.get_rank())
        dist.barrier()  # other ranks seed their own generators meanwhile
        print(dist.get_rank(), torch.randint(0, 1000, (3,)).tolist())
    """, nproc=3, cluster="cpu-host")
    got = dict(line.split(" ", 1) for line in capsys.readouterr().out.splitlines())
    for r in range(3):
        assert got[str(r)] == str(torch.randint(0, 1000, (3,), generator=torch.Generator().manual_seed(r)).tolist())


def test_objects_of_script_classes_travel(tmp_path, capsys):
    run(tmp_path, """
        from dataclasses import dataclass

        @dataclass
        class Note:
            rank: int

        dist.init_process_group("gloo")
        out = [None] * dist.get_world_size()
        dist.all_gather_object(out, Note(dist.get_rank()))
        print(all(type(o) is Note for o in out), [o.rank for o in out])
    """, nproc=2, cluster="cpu-host")
    assert capsys.readouterr().out.splitlines() == ["True [0, 1]"] * 2


def test_two_nodes_place_ranks_node_major(tmp_path, capsys):
    c = torchrun_cluster("hgx-h100", 2, 2)
    assert c.num_nodes == 2 and c.ranks_per_node == 2
    result = launch(script(tmp_path, "dist.init_process_group('nccl')\nprint(os.environ['RANK'], "
                                     "os.environ['LOCAL_RANK'], os.environ['GROUP_RANK'])\n"),
                    nproc_per_node=2, nnodes=2, cluster="hgx-h100")
    assert sorted(capsys.readouterr().out.splitlines()) == ["0 0 0", "1 1 0", "2 0 1", "3 1 1"]
    assert "2x" in result.worlds[0].cluster


def test_exit_status(tmp_path):
    assert run(tmp_path, "sys.exit(0)\n").ok
    with pytest.raises(RankFailed, match="rank 1: prog.py exited with status 3"):
        run(tmp_path, "dist.init_process_group('nccl')\nsys.exit(3 if dist.get_rank() == 1 else 0)\n")


def test_a_raising_rank_is_named_with_its_exception(tmp_path):
    with pytest.raises(RankFailed, match="rank 1 raised KeyError") as info:
        run(tmp_path, "dist.init_process_group('nccl')\nif dist.get_rank() == 1:\n    {}['x']\ndist.barrier()\n")
    assert isinstance(info.value.original, KeyError)


def test_torch_errors_for_misuse(tmp_path):
    with pytest.raises(RankFailed, match="Default process group has not been initialized"):
        run(tmp_path, "dist.all_reduce(torch.ones(1))\n")
    with pytest.raises(RankFailed, match="initialize the default process group twice"):
        run(tmp_path, "dist.init_process_group('gloo')\ndist.init_process_group('gloo')\n")
    with pytest.raises(RankFailed, match="environment variable MASTER_ADDR expected"):
        run(tmp_path, """
            import torch.multiprocessing as mp
            def fn(rank):
                del os.environ["MASTER_ADDR"]
                dist.init_process_group("gloo", rank=rank, world_size=2)
            mp.spawn(fn, nprocs=2)
        """, nproc=1)


def test_deadlock_names_the_ranks(tmp_path):
    with pytest.raises(DeadlockError, match="rank 0 waits in recv.src=1.; rank 1 waits in recv.src=0."):
        run(tmp_path, "dist.init_process_group('nccl')\nt = torch.zeros(1)\ndist.recv(t, src=1 - dist.get_rank())\n")


def test_process_failure_is_reported_and_the_parent_goes_on(tmp_path, capsys):
    """The failing child's exit code is 1 and its traceback printed, as multiprocessing does; the other, stopped when
    it failed, has -SIGTERM; the parent goes on and the launch is ok (the world it started records the failure)."""
    result = run(tmp_path, """
        import torch.multiprocessing as mp
        def child(rank):
            dist.init_process_group("gloo", rank=rank, world_size=2)
            raise RuntimeError(f"child {rank} gives up")
        if __name__ == "__main__":
            ps = [mp.Process(target=child, args=(r,)) for r in range(2)]
            for p in ps:
                p.start()
            for p in ps:
                p.join()
            print("codes", [p.exitcode for p in ps])
    """, nproc=1, cluster="cpu-host")
    captured = capsys.readouterr()
    assert "codes [1, -15]" in captured.out and "child 0 gives up" in captured.err
    assert "Process Process-" in captured.err and 'prog.py", line 8, in child' in captured.err
    assert result.ok and [w.kind for w in result.worlds] == ["torchrun", "process"]
    assert "child 0 gives up" in result.worlds[1].error


def test_premul_sum_from_torchs_own_factory(tmp_path, capsys):
    """dist._make_nccl_premul_sum is torch's (not served); its op carries the factor, a float or a tensor."""
    run(tmp_path, """
        dist.init_process_group("nccl")
        r = dist.get_rank()
        t = torch.ones(2, device="cuda")
        dist.all_reduce(t, op=dist._make_nccl_premul_sum(float(r + 1)))
        u = torch.ones(1, device="cuda")
        dist.all_reduce(u, op=dist._make_nccl_premul_sum(torch.tensor([0.5 * r], device="cuda")))
        print(t.tolist(), u.tolist())
    """, nproc=3)
    assert capsys.readouterr().out.splitlines() == ["[6.0, 6.0] [1.5]"] * 3


def test_ddp_on_a_subgroup(tmp_path, capsys):
    """DDP(process_group=new_group(...)): each pair broadcasts its first rank's weights and averages its own
    gradients (closed form: inputs r + 1 on 2 rows; pair {0, 1} -> 2 * 1.5, pair {2, 3} -> 2 * 3.5)."""
    run(tmp_path, """
        import torch.nn as nn
        from torch.nn.parallel import DistributedDataParallel as DDP
        dist.init_process_group("gloo")
        r = dist.get_rank()
        pair = [dist.new_group([0, 1]), dist.new_group([2, 3])][r // 2]
        m = nn.Linear(4, 1)
        with torch.no_grad():
            m.weight.fill_(float(r))
        ddp = DDP(m, process_group=pair)
        ddp(torch.ones(2, 4) * (r + 1)).sum().backward()
        print(r, m.weight.flatten().tolist(), m.weight.grad.flatten().tolist(), dist.get_world_size(ddp.process_group))
    """, nproc=4, cluster="cpu-host")
    lines = sorted(capsys.readouterr().out.splitlines())
    assert lines == [f"{r} {[float(r // 2 * 2)] * 4} {[3.0 if r < 2 else 7.0] * 4} 2" for r in range(4)]


def test_work_get_future_is_a_torch_future(tmp_path, capsys):
    run(tmp_path, """
        from torch.futures import Future
        dist.init_process_group("gloo")
        t = torch.full((2,), float(dist.get_rank() + 1))
        fut = dist.all_reduce(t, async_op=True).get_future()
        doubled = fut.then(lambda f: f.value()[0] * 2)
        print(isinstance(fut, Future), fut.wait()[0].tolist(), doubled.wait().tolist())
    """, nproc=2, cluster="cpu-host")
    assert capsys.readouterr().out.splitlines() == ["True [3.0, 3.0] [6.0, 6.0]"] * 2


def test_device_mesh_is_torchs_with_simcomms_groups(tmp_path, capsys):
    """init_device_mesh and DeviceMesh(...) in a rank are torch's own (a "cuda" mesh is one of the device the
    tensors live on here), their groups torch ProcessGroups that simcomm serves: every collective takes them."""
    result = run(tmp_path, """
        from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
        dist.init_process_group("nccl")
        mesh = init_device_mesh("cuda", (2, 2), mesh_dim_names=("dp", "tp"))
        same = DeviceMesh("cuda", torch.arange(4).reshape(2, 2))
        x = torch.ones(1).cuda() * (dist.get_rank() + 1)
        dist.all_reduce(x, group=mesh["tp"].get_group())
        tp = mesh["tp"].get_group()
        print(dist.get_rank(), mesh.get_coordinate(), x.item(), dist.get_process_group_ranks(same.get_group(0)),
              type(mesh).__module__, mesh.device_type, isinstance(tp, dist.ProcessGroup), tp.size())
    """, nproc=4)
    lines = sorted(capsys.readouterr().out.splitlines())
    mesh = "torch.distributed.device_mesh cpu True 2"
    assert lines == [f"0 (0, 0) 3.0 [0, 2] {mesh}", f"1 (0, 1) 3.0 [1, 3] {mesh}", f"2 (1, 0) 7.0 [0, 2] {mesh}",
                     f"3 (1, 1) 7.0 [1, 3] {mesh}"]
    assert result.ok


def test_torchs_own_process_group_setup_stops_with_a_clear_error(tmp_path):
    """A script that reaches torch's own c10d setup some other way than the served functions: refused at once,
    never a hang (a real rendezvous would wait for peers that are not there)."""
    with pytest.raises(DistError, match=r"rank 0: torch's own process-group setup .* another way"):
        run(tmp_path, """
            from torch.distributed import distributed_c10d
            distributed_c10d.init_process_group("gloo")
        """, cluster="cpu-host")


def test_fsdp2_tp_on_meta_parameters_reports_step_times(capsys):
    """--cuda-as meta: FSDP2 + DTensor TP of a large layer costed by size alone (torch refuses to train FSDP2 on
    meta parameters; a launch lets it, see docs/launch.md): each step's simulated time is the FSDP all-gathers and
    reduce-scatters, the TP all-reduces and the compute; more nodes for the same model per rank cost more."""
    times = {}
    for nodes in (1, 2):
        capsys.readouterr()
        result = launch(Path(__file__).resolve().parents[3] / "examples" / "torch" / "fsdp_tp_torchrun.py", ["--tp", "8", "--dim", "4096", "--layers", "2", "--seq",
                                                           "2048", "--batch", "1", "--steps", "2"],
                        nproc_per_node=8, nnodes=nodes, cluster="hgx-h100", cuda_as="meta", count_flops=True)
        steps = [float(line.split()[3]) for line in capsys.readouterr().out.splitlines() if line.startswith("step")]
        assert result.ok and len(steps) == 2 and steps[0] == steps[1] > 0
        times[nodes] = steps[0]
    # compute alone: 6 x params/TP x tokens per step at the H100's rate is a floor
    flops = 6 * (2 * 8 * 4096 * 4096 / 8 + 4096) * 2048
    assert times[1] * 1e-3 > flops / 989e12
    assert times[2] > times[1]


@pytest.mark.scale
def test_fsdp2_tp_at_512_ranks_on_meta_parameters(capsys):
    """The must-show of issue 25: 64 nodes x 8 H100s, TP 8 inside a node, FSDP2 over 64, on meta parameters
    (about 90 s of CPU on an idle core; -m scale). Prints the step's simulated time."""
    result = launch(Path(__file__).resolve().parents[3] / "examples" / "torch" / "fsdp_tp_torchrun.py",
                    ["--tp", "8", "--dim", "8192", "--layers", "2", "--seq", "4096", "--batch", "1", "--steps", "1"],
                    nproc_per_node=8, nnodes=64, cluster="hgx-h100", cuda_as="meta", count_flops=True)
    [line] = [x for x in capsys.readouterr().out.splitlines() if x.startswith("step")]
    assert result.ok and result.worlds[0].nprocs == 512 and float(line.split()[3]) > 0


def test_ddp_on_meta_parameters(tmp_path, capsys):
    """DDP with --cuda-as meta --compute (the docs' own example shape): no data, the same buckets and overlap
    from the first step; a larger bucket cap means fewer all-reduces."""
    prog = """
        import os, time
        import torch.nn as nn
        from torch.nn.parallel import DistributedDataParallel as DDP
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
        dist.init_process_group("nccl")
        model = nn.Sequential(nn.Linear(1024, 4096), nn.GELU(), nn.Linear(4096, 1024)).cuda()
        ddp = DDP(model, device_ids=[int(os.environ["LOCAL_RANK"])], bucket_cap_mb=float(sys.argv[1]))
        opt = torch.optim.AdamW(ddp.parameters())
        for step in range(2):
            start = time.perf_counter()
            ddp(torch.randn(64, 1024, device="cuda")).square().mean().backward()
            opt.step()
            opt.zero_grad()
            torch.cuda.synchronize()
            if dist.get_rank() == 0:
                print(step, next(ddp.parameters()).is_meta, time.perf_counter() - start)
    """
    elapsed = {}
    for cap in ("1", "64"):
        capsys.readouterr()
        result = run(tmp_path, prog, nproc=4, args=[cap], cuda_as="meta", count_flops=True)
        lines = capsys.readouterr().out.split()
        assert result.ok and lines[1] == lines[4] == "True"
        assert float(lines[2]) == pytest.approx(float(lines[5]), rel=1e-6)  # the same buckets in both steps
        elapsed[cap] = float(lines[2])
    assert elapsed["1"] != elapsed["64"] and min(elapsed.values()) > 0


def test_groups_and_works_are_torchs_types(tmp_path, capsys):
    """In a rank, group.WORLD, new_group's groups and a mesh's are torch ProcessGroups and an async call's handle
    a torch Work, as under torchrun; a rank outside a group gets torch's marker, whose ranks torch reports as the
    last such group's."""
    result = run(tmp_path, """
        dist.init_process_group("gloo")
        w = dist.all_reduce(torch.ones(2), async_op=True)
        g = dist.new_group([0, 1])
        print(dist.get_rank(), isinstance(dist.group.WORLD, dist.ProcessGroup), isinstance(w, dist.Work), w.wait(),
              isinstance(g, dist.ProcessGroup), g is dist.GroupMember.NON_GROUP_MEMBER,
              dist.get_process_group_ranks(g), dist.get_rank(g), dist.get_world_size(g))
    """, nproc=3, cluster="cpu-host")
    assert result.ok and sorted(capsys.readouterr().out.splitlines()) == [
        "0 True True True True False [0, 1] 0 2", "1 True True True True False [0, 1] 1 2",
        "2 True True True False True [0, 1] -1 -1"]
