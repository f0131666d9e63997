"""`simcomm launch` on the command line: output, the simulated time, exit codes and user tracebacks."""
import json
import re

from simcomm.cli import main


def test_launch_prints_the_script_output_and_simulated_time(tmp_path, capsys):
    prog = tmp_path / "p.py"
    prog.write_text("import sys, torch, torch.distributed as dist\ndist.init_process_group('nccl')\n"
                    "t = torch.ones(4).cuda()\ndist.all_reduce(t)\nprint(dist.get_rank(), t.tolist(), sys.argv[1:])\n")
    summary = tmp_path / "s.json"
    code = main(["launch", "--nproc-per-node", "2", "--cluster", "hgx-h100", "--summary", str(summary),
                 str(prog), "--lr", "3"])
    out, err = capsys.readouterr()
    assert code == 0
    assert sorted(out.splitlines()) == ["0 [2.0, 2.0, 2.0, 2.0] ['--lr', '3']", "1 [2.0, 2.0, 2.0, 2.0] ['--lr', '3']"]
    assert "simcomm launch: torchrun world of 2 ranks on hgx-h100:" in err and "us simulated" in err
    worlds = json.loads(summary.read_text())["worlds"]
    assert worlds[0]["nprocs"] == 2 and worlds[0]["elapsed"] > 0


def test_launch_failures(tmp_path, capsys):
    prog = tmp_path / "bad.py"
    prog.write_text("def helper():\n    return 1 / 0\nhelper()\n")
    assert main(["launch", "--cluster", "cpu-host", str(prog)]) == 1
    err = capsys.readouterr().err
    assert "ZeroDivisionError" in err and "bad.py\", line 2, in helper" in err and "rank 0 raised" in err
    # once, trimmed to the rank's own frames (issue 25: a raw traceback through simcomm's files came first)
    assert err.count("Traceback") == 1 and err.count("ZeroDivisionError") == 2 and "simcomm/" not in err
    assert main(["launch", "--cluster", "cpu-host", str(tmp_path / "missing.py")]) == 2
    assert "not found" in capsys.readouterr().err
    assert main(["launch", "--cluster", "nope", str(prog)]) == 2
    assert "unknown preset" in capsys.readouterr().err


# Takes the torchrun branch when torchrun's variables are set, else starts its own 3 ranks (the common pattern).
BOTH_BRANCHES = """\
import os
import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def work(rank, world, how):
    dist.init_process_group("gloo", rank=rank, world_size=world)
    t = torch.tensor([rank + 1.0])
    dist.all_reduce(t)
    print(f"{how} rank {rank} of {dist.get_world_size()}: sum {t.item()}, RANK in env: {os.environ.get('RANK')}")
    dist.destroy_process_group()


if __name__ == "__main__":
    if "RANK" in os.environ:
        work(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), "torchrun")
    else:
        os.environ["MASTER_ADDR"] = "127.0.0.1"
        os.environ.setdefault("MASTER_PORT", "29533")
        mp.spawn(work, args=(3, "spawn"), nprocs=3, join=True, start_method="fork")
"""


def test_a_self_launching_script_takes_its_python_branch(tmp_path, capsys, monkeypatch):
    """Without --nproc-per-node/--nnodes the script runs as `python script.py`: no RANK/WORLD_SIZE in its
    environment (so it spawns its own ranks, which inherit none either, as under torch); with them, torchrun's."""
    import os
    import subprocess
    import sys

    from simcomm.backends import free_port
    for var in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(var, raising=False)
    prog = tmp_path / "both.py"
    prog.write_text(BOTH_BRANCHES)
    spawned = [f"spawn rank {r} of 3: sum 6.0, RANK in env: None" for r in range(3)]
    assert main(["launch", "--cluster", "cpu-host", str(prog)]) == 0
    out, err = capsys.readouterr()
    assert sorted(out.splitlines()) == spawned
    assert "python world of 1 rank on" in err and "spawn world of 3 ranks on" in err
    assert "RANK" not in os.environ  # nothing leaked into the launching process
    assert main(["launch", "--nproc-per-node", "2", "--cluster", "cpu-host", str(prog)]) == 0
    out, err = capsys.readouterr()
    assert sorted(out.splitlines()) == [f"torchrun rank {r} of 2: sum 3.0, RANK in env: {r}" for r in range(2)]
    assert "torchrun world of 2 ranks" in err and "spawn world" not in err
    env = dict(os.environ, MASTER_PORT=str(free_port()), OMP_NUM_THREADS="1", GLOO_SOCKET_IFNAME="lo")
    real = subprocess.run([sys.executable, str(prog)], env=env, capture_output=True, text=True, timeout=240)
    assert real.returncode == 0, real.stderr[-2000:]
    # what plain python does with the same file (its spawned processes share the pipe, so a line can start where
    # another's text stops, or a blank line slip in)
    lines = re.split(r"\n|(?=spawn rank \d)", real.stdout)
    assert sorted(line for line in lines if line.strip()) == spawned
