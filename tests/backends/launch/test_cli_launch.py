"""`simcomm launch` on the command line: output, the simulated time, exit codes and user tracebacks."""
import json

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
    assert main(["launch", "--cluster", "cpu-host", str(tmp_path / "missing.py")]) == 2
    assert "not found" in capsys.readouterr().err
    assert main(["launch", "--cluster", "nope", str(prog)]) == 2
    assert "unknown preset" in capsys.readouterr().err
