"""Records on shared filesystems (issue 13): one file per run, written without a lock, read
merged with runs.jsonl; concurrent writers lose nothing, a full disk says so in one line and
leaves no debris, shared directories keep their owner and mode."""
import fcntl
import json
import multiprocessing
import os
import stat
import subprocess

import pytest

from ddlbench import config, launch, record
from ddlbench.analysis import summary
from ddlbench.analysis.records import load
from helpers import records

WRITERS = 8
PER_WRITER = 40


def _no_lock(*_args, **_kwargs):
    raise OSError(37, "No locks available")  # ENOLCK: what flock says where locks are off (NFS nolock)


def _writer(results, index, barrier):
    barrier.wait()  # all eight start together
    for i in range(PER_WRITER):
        record.write(results, {"writer": index, "i": i, "payload": "x" * 2000})


def test_eight_concurrent_writers_without_locks_lose_nothing(tmp_path, monkeypatch):
    monkeypatch.setattr(fcntl, "flock", _no_lock)  # inherited by the forked writers
    (tmp_path / "runs.jsonl").write_text(json.dumps({"writer": -1, "i": 0}) + "\n")  # an earlier version's
    ctx = multiprocessing.get_context("fork")
    barrier = ctx.Barrier(WRITERS)
    procs = [ctx.Process(target=_writer, args=(tmp_path, k, barrier)) for k in range(WRITERS)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert [p.exitcode for p in procs] == [0] * WRITERS
    got = records(tmp_path)
    assert got[0] == {"writer": -1, "i": 0}  # runs.jsonl reads first, then the record files
    pairs = [(r["writer"], r["i"]) for r in got[1:]]
    assert sorted(pairs) == [(k, i) for k in range(WRITERS) for i in range(PER_WRITER)]  # 320 of 320
    assert not [p for p in (tmp_path / "records").iterdir() if not p.name.endswith(".json")]


@pytest.fixture
def tiny_disk(tmp_path):
    """A 64 KiB tmpfs: a disk that fills after a few records."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    mnt = tmp_path / "disk"
    mnt.mkdir()
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mnt)], capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {proc.stderr.strip()}")
    yield mnt
    subprocess.run(["umount", str(mnt)], check=True)


def test_a_full_disk_is_one_clear_line_and_leaves_no_debris(tiny_disk, capsys):
    written = []
    with pytest.raises(record.RecordError) as err:
        for i in range(100):
            written.append(record.write(tiny_disk, {"i": i, "payload": "x" * 20000}))
    msg = str(err.value)
    assert "\n" not in msg and "No space left on device (ENOSPC)" in msg and str(tiny_disk / "records") in msg
    assert 0 < len(written) < 100
    assert sorted(p.name for p in (tiny_disk / "records").iterdir()) == sorted(p.name for p in written)
    assert [r["i"] for r in records(tiny_disk)] == list(range(len(written)))  # the earlier ones intact

    # the launcher, on a disk without a byte left: one line on stderr, the run failed, no debris
    with pytest.raises(OSError), open(tiny_disk / "filler", "wb") as f:
        while True:
            f.write(b"x" * 4096)
            f.flush()
    cfg = config.resolve(config._compose(["model=tiny-resnet", "workers=2"]))
    run_dir = tiny_disk / "run"
    rec = launch.base_record(cfg)
    launch.finish(cfg, rec, run_dir, 1, "rank 1 died", tiny_disk)
    assert rec["status"] == "failed" and "ENOSPC" in rec["error"]
    err_lines = capsys.readouterr().err.strip().splitlines()
    assert len(err_lines) == 1 and err_lines[0].startswith("ddlbench: error: run record not written to ")
    assert "ENOSPC" in err_lines[0]
    assert len(list((tiny_disk / "records").iterdir())) == len(written)


def test_shared_results_directories_keep_their_owner_and_mode(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o2775)  # a group's setgid results directory
    old_umask = os.umask(0o002)
    try:
        path = record.write(shared, {"a": 1})
    finally:
        os.umask(old_umask)
    assert stat.S_IMODE(shared.stat().st_mode) == 0o2775
    assert stat.S_IMODE((shared / "records").stat().st_mode) == 0o2775  # the umask's mode, setgid inherited
    assert stat.S_IMODE(path.stat().st_mode) == 0o664
    assert path.parent == shared / "records" and path.name.endswith(".json")
    assert json.loads(path.read_text()) == {"a": 1}


def test_readers_merge_record_files_with_runs_jsonl_and_summary_exports_them(tmp_path, capsys):
    results = tmp_path / "results"
    results.mkdir()
    old = {"method": "bsp-a2a", "model": "m", "workers": 2, "local_batch": 4, "device": "cpu", "backend": "gloo",
           "engine": "torch", "status": "ok", "samples_per_sec": 10.0, "samples_per_sec_per_repeat": [10.0]}
    (results / "runs.jsonl").write_text(json.dumps(old) + "\n")
    new = {**old, "samples_per_sec": 30.0, "samples_per_sec_per_repeat": [30.0]}
    record.write(results, new)
    (results / "records" / "torn.json").write_text('{"torn": ')
    loaded = load([results])
    assert loaded.records == [old, new]
    assert loaded.problems == [f"{results / 'records' / 'torn.json'}: unparsable record skipped "
                               "(Expecting value: line 1 column 10 (char 9))"]
    assert "20.00 ± 14.14" in summary.render(loaded.records)  # one cell: the same configuration

    out = tmp_path / "merged.jsonl"
    assert summary.main([str(results), "--export", str(out)]) == 0
    assert [json.loads(line) for line in out.read_text().splitlines()] == [old, new]
    assert "2 records exported" in capsys.readouterr().err
    # an export into the directory it reads would be read twice next time
    assert summary.main([str(results), "--export", str(results / "all.jsonl")]) == 2
    assert not (results / "all.jsonl").exists()



def test_commbench_steps_and_predictions_land_where_locks_are_off(tmp_path, monkeypatch):
    """Commbench's rows are files of their own, read in the order written among the runs'
    records; `make predict`'s appends go on without a lock where flock says ENOLCK."""
    monkeypatch.setattr(fcntl, "flock", _no_lock)
    record.write(tmp_path, {"run": 1})
    record.write_rows(tmp_path, [{"step": 1, "row": 0}, {"step": 1, "row": 1}])
    record.write(tmp_path, {"run": 2})
    assert records(tmp_path) == [{"run": 1}, {"step": 1, "row": 0}, {"step": 1, "row": 1}, {"run": 2}]
    predictions = tmp_path / "predictions.jsonl"
    record.append(predictions, {"p": 1}, {"p": 2})
    record.append(predictions, {"p": 3})
    assert [json.loads(line) for line in predictions.read_text().splitlines()] == [{"p": 1}, {"p": 2}, {"p": 3}]
    assert not list(tmp_path.rglob("*.tmp"))
