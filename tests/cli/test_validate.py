"""`simcomm validate`: a program scenario's module is looked up without running it unless --import asks."""
import json

from simcomm.cli import main


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def scenario(tmp_path, module: str, source: str):
    """A program scenario next to its module, whose import writes a marker file (a side effect)."""
    (tmp_path / f"{module}.py").write_text(f"open({str(tmp_path / (module + '.ran'))!r}, 'w').write('x')\n" + source)
    path = tmp_path / f"{module}.yaml"
    path.write_text(f"cluster: {{preset: cpu-host}}\nworkload:\n  kind: program\n  program: {module}:main\n"
                    "  ranks: 2\n")
    return path, tmp_path / f"{module}.ran"


def test_validate_runs_no_program_code_unless_import_asks(capsys, tmp_path):
    path, ran = scenario(tmp_path, "vprog_ok", "def main(rank):\n    return rank\n")
    code, out, err = run(capsys, "validate", str(path))
    assert code == 0 and out == f"ok: {path}: program on cpu-host (4 ranks)\n" and err == ""
    assert not ran.exists()
    code, out, err = run(capsys, "validate", "--import", str(path))
    assert code == 0 and out == f"ok: {path}: program on cpu-host (4 ranks)\n" and ran.exists()


def test_import_reports_a_module_that_fails_as_it_is_imported(capsys, tmp_path):
    """The module exists and defines main, so the lookup passes; importing it raises, which only --import sees."""
    path, ran = scenario(tmp_path, "vprog_bad", "def main(rank):\n    return rank\n\nraise RuntimeError('boom')\n")
    assert run(capsys, "validate", str(path))[0] == 0 and not ran.exists()
    code, out, err = run(capsys, "validate", "--import", str(path))
    assert code == 2 and out == "" and ran.exists()
    assert err == (f"{path}:4: workload.program: cannot import module 'vprog_bad' (looked in {tmp_path}, the working "
                   "directory and the installed packages): RuntimeError: boom\n")
    code, out, _ = run(capsys, "validate", "--import", "--json", str(path))
    [doc] = json.loads(out)
    assert code == 2 and doc["ok"] is False and doc["errors"][0]["path"] == "workload.program"
    assert "RuntimeError: boom" in doc["errors"][0]["message"]
