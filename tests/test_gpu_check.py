"""bench/gpu_check.sh, the check of a GPU machine lent for minutes: `make gpu-pack` fills what travels with the tree,
its probes' time limits fit in 8 minutes, and its smoke run (`bash bench/gpu_check.sh run --smoke`, as docs/gpu.md
shows it) runs every probe tiny on the CPU into the JSON and the table, a probe that fails or overruns costing only its
own line. What the probes measure needs a GPU; here they check their plumbing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from sweepit_testing import REPO, wait_until, write_mnist_subset

SMOKE = "bash bench/gpu_check.sh run --smoke"
PROBES = ["nvidia_smi", "python", "mnist", "throughput_bf16", "throughput_fp32", "fork", "deterministic", "shared",
          "scaling"]
NO_DRIVER = "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver."


def _shell(tmp_path: Path, **extra: str) -> dict[str, str]:
    """A user's shell after `source .venv/bin/activate` (python3 is this venv's), an nvidia-smi that finds no driver
    (as on a machine without a GPU, wherever the test runs), the runs under tmp_path and the results in tmp_path/out."""
    stub = tmp_path / "bin" / "nvidia-smi"
    stub.parent.mkdir()
    stub.write_text(f"#!/bin/sh\necho \"{NO_DRIVER}\"\nexit 9\n")
    stub.chmod(0o755)
    path = [str(stub.parent), str(Path(sys.executable).parent), os.environ.get("PATH", "")]
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "GPU_CHECK_PROBES", "GPU_CHECK_LIMIT_SCALE")}
    return {**env, "PATH": os.pathsep.join(path), "TMPDIR": str(tmp_path), "OUT": str(tmp_path / "out"), **extra}


def _record(tmp_path: Path) -> dict[str, Any]:
    record: dict[str, Any] = json.loads((tmp_path / "out" / "gpu_check.json").read_text())
    return record


def _left_running(tmp_path: Path) -> list[str]:
    """Command lines of processes that name tmp_path (the probes' runs are under it)."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            words = cmdline.read_bytes().split(b"\0")
        except OSError:
            continue
        if any(str(tmp_path).encode() in w for w in words):
            found.append(" ".join(w.decode(errors="replace") for w in words))
    return found


def test_the_probes_limits_fit_in_eight_minutes_with_the_seconds_each_takes_to_stop() -> None:
    proc = subprocess.run([sys.executable, "bench/gpu_check.py", "plan"], cwd=REPO, capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    limits = {name: float(limit) for name, limit in (line.split("\t") for line in proc.stdout.splitlines())}
    assert list(limits) == PROBES
    kill_after = 5  # `timeout -k 5` in the script
    assert sum(limits.values()) + kill_after * len(limits) < 8 * 60, limits
    assert "timeout -k 5 " in (REPO / "bench" / "gpu_check.sh").read_text()


def test_make_gpu_pack_copies_hydra_as_installed_and_mnist_within_64_mib(tmp_path: Path) -> None:
    """In a copy of the scripts (the pack writes beside them, into the copy's root), from this venv."""
    root = tmp_path / "tree"
    (root / "bench").mkdir(parents=True)
    (root / "Makefile").write_text((REPO / "Makefile").read_text())
    for name in ("gpu_check.sh", "gpu_check.py", "bench_gpu.py", "machine.py"):
        (root / "bench" / name).write_text((REPO / "bench" / name).read_text())
    mnist = write_mnist_subset(tmp_path / "mnist", 100, 50)
    proc = subprocess.run(["make", "gpu-pack", f"PY={sys.executable}", f"MNIST_ROOT={mnist}"], cwd=root,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "MiB together, at most 64 MiB" in proc.stdout
    packed = root / ".devpkgs"
    assert {"hydra", "omegaconf", "antlr4"} <= {p.name for p in packed.iterdir()}
    assert not list(packed.rglob("*.pyc"))
    assert sorted(p.name for p in (root / ".devdata" / "mnist").iterdir()) == sorted(p.name for p in mnist.iterdir())
    # What the run puts first on PYTHONPATH is what is imported, with its distribution's metadata.
    probe = ("import hydra, omegaconf, importlib.metadata as m; "
             "print(hydra.__file__, omegaconf.__file__, m.version('hydra-core'), m.version('omegaconf'))")
    seen = subprocess.run([sys.executable, "-c", probe], env={**os.environ, "PYTHONPATH": str(packed)},
                          capture_output=True, text=True, timeout=60)
    assert seen.returncode == 0, seen.stderr
    hydra_file, omegaconf_file, hydra_version, omegaconf_version = seen.stdout.split()
    assert hydra_file.startswith(str(packed)) and omegaconf_file.startswith(str(packed))
    import hydra
    import omegaconf
    assert (hydra_version, omegaconf_version) == (hydra.__version__, omegaconf.__version__)


@pytest.mark.slow
@pytest.mark.tier_slow
def test_smoke_runs_every_probe_and_writes_the_json_and_the_table(tmp_path: Path) -> None:
    assert f"`{SMOKE}`" in (REPO / "docs" / "gpu.md").read_text()
    proc = subprocess.run(["bash", "-c", SMOKE], cwd=REPO, env=_shell(tmp_path), capture_output=True, text=True,
                          timeout=1800)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    record = _record(tmp_path)
    probes = record["probes"]
    assert record["smoke"] is True and record["command"] == SMOKE and list(probes) == PROBES
    # nvidia-smi fails here, and the run goes on: its exit status and what it said are its line.
    assert record["failed"] == ["nvidia_smi"] and probes["nvidia_smi"]["rc"] == 1
    assert probes["nvidia_smi"]["summary"] == f"nvidia-smi exited 9: {NO_DRIVER}"
    assert all(probes[name]["rc"] == 0 and probes[name]["ok"] for name in PROBES[1:]), probes
    assert probes["python"]["facts"]["hydra"] and probes["mnist"]["epochs"] == 1
    for precision in ("bf16", "fp32"):
        figures = probes[f"throughput_{precision}"]
        assert figures["precision"] == precision and figures["ratio_sweepit_over_plain"] > 0
    assert probes["fork"]["available"]["statuses"] == probes["fork"]["tensor"]["statuses"] == ["completed"] * 2
    metrics = probes["deterministic"]["metrics"]
    assert len(metrics[0]) == 2 and metrics[0] == metrics[1] and probes["deterministic"]["differing_weights"] == []
    assert [probes["shared"][run]["status"] for run in ("alone", "shared_0", "shared_1")] == ["completed"] * 3
    assert [point["gpus"] for point in probes["scaling"]["points"]] == [1, 2]
    # At most 8 files come back from a lent machine's result folder.
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["gpu_check.json", "gpu_check.log", "gpu_check.txt"]
    table = (tmp_path / "out" / "gpu_check.txt").read_text().splitlines()
    rows = {line.split()[0]: line.split()[1:3] for line in table[4:]}
    assert rows == {name: ["1", "FAILED"] if name == "nvidia_smi" else ["0", "ok"] for name in PROBES}, table
    log = (tmp_path / "out" / "gpu_check.log").read_text()
    assert [line.split(":")[0] for line in log.splitlines() if line.startswith("== ")] == [f"== {n}" for n in PROBES]


@pytest.mark.slow
def test_a_probe_past_its_limit_is_stopped_with_its_sweeps_and_recorded(tmp_path: Path) -> None:
    """`shared` starts three sweeps one after the other, each seconds long: a limit of 2 s stops it in the first, and
    the sweep's driver stops its job (the limit's SIGTERM reaches the probe's process group)."""
    env = _shell(tmp_path, GPU_CHECK_PROBES="shared", GPU_CHECK_LIMIT_SCALE="0.05")
    proc = subprocess.run(["bash", "-c", SMOKE], cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    probes = _record(tmp_path)["probes"]
    assert list(probes) == ["shared"]
    assert probes["shared"]["rc"] == 124 and probes["shared"]["summary"] == "stopped at its limit of 2 s"
    assert probes["shared"]["log_tail"], "the probe's last lines, for what it was doing"
    wait_until(lambda: not _left_running(tmp_path), lambda: f"processes left running: {_left_running(tmp_path)}", 60)
