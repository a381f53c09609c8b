"""``python -m synet bench``'s arguments are checked before a run of minutes, not after it."""

import pytest

from synet.__main__ import main


@pytest.mark.parametrize("argv, message", [
    (["--only", "G1,ZZ"], "--only: unknown workloads ['ZZ']; expected some of G1, G2"),
    (["--repeats", "0"], "argument --repeats: expected an int >= 1, got '0'"),
    (["--repeats", "-3"], "argument --repeats: expected an int >= 1, got '-3'"),
    (["--json", "/nonexistent-synet-dir/x.json"], "--json: no directory '/nonexistent-synet-dir'"),
    (["--plot", "/nonexistent-synet-dir/x.png"], "--plot: no directory '/nonexistent-synet-dir'"),
    (["--json", "."], "--json: '.' is a directory"),
    (["--plot", "x.png", "--isa", "all"], "--plot draws one run's speed-ups; run it without --isa"),
    (["--isa", "avx3"], "--isa: unknown levels ['avx3']"),
])
def test_bench_refuses_bad_arguments_before_running(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["bench", *argv])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert message in err, err
    assert "[1/" not in capsys.readouterr().out   # no workload ran


def test_bench_refuses_an_unwritable_json_path(tmp_path, capsys):
    folder = tmp_path / "locked"
    folder.mkdir()
    folder.chmod(0o500)
    try:
        import os
        if os.access(folder, os.W_OK):
            pytest.skip("running as a user who may write anywhere (root)")
        with pytest.raises(SystemExit):
            main(["bench", "--json", str(folder / "x.json")])
        assert "--json: cannot write" in capsys.readouterr().err
    finally:
        folder.chmod(0o700)
