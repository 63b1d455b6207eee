"""bench/gpu_check.sh, the check of a GPU machine lent for minutes: `make gpu-pack` fills what travels with the tree,
its probes' time limits fit in 9 minutes, and its smoke run (`bash bench/gpu_check.sh run --smoke`, as docs/gpu.md
shows it) runs every probe tiny on the CPU into the JSON and the table, a probe that fails or overruns costing only its
own line. What the probes measure needs a GPU; here they check their plumbing."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from sweepit_testing import REPO, wait_until, write_mnist_subset

SMOKE = "bash bench/gpu_check.sh run --smoke"
# In the order they run: those that never ran on a GPU first, mnist_best and the scaling plan last.
PROBES = ["nvidia_smi", "python", "fork", "failing_rank", "resume", "precision", "streamed", "deterministic", "shared",
          "throughput_bf16", "throughput_fp32", "mnist", "scaling"]
NO_DRIVER = "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver."


def _shell(tmp_path: Path, **extra: str) -> dict[str, str]:
    """A user's shell after `source .venv/bin/activate` (python3 is this venv's), an nvidia-smi that finds no driver
    (as on a machine without a GPU, wherever the test runs), the runs under tmp_path and the results in tmp_path/out."""
    stub = tmp_path / "bin" / "nvidia-smi"
    stub.parent.mkdir()
    stub.write_text(f"#!/bin/sh\necho \"{NO_DRIVER}\"\nexit 9\n")
    stub.chmod(0o755)
    path = [str(stub.parent), str(Path(sys.executable).parent), os.environ.get("PATH", "")]
    # As from a shell that never set PYTORCH_NVML_BASED_CUDA_CHECK (this process imported sweepit, which sets it).
    dropped = ("PYTHONPATH", "GPU_CHECK_PROBES", "GPU_CHECK_LIMIT_SCALE", "PYTORCH_NVML_BASED_CUDA_CHECK")
    env = {k: v for k, v in os.environ.items() if k not in dropped}
    return {**env, "PATH": os.pathsep.join(path), "TMPDIR": str(tmp_path), "OUT": str(tmp_path / "out"), **extra}


def _record(tmp_path: Path) -> dict[str, Any]:
    record: dict[str, Any] = json.loads((tmp_path / "out" / "gpu_check.json").read_text())
    return record


def _left_running(tmp_path: Path, pids: bool = False) -> list[str]:
    """Command lines (or `pids`) of processes that name tmp_path (the probes' runs are under it)."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            words = cmdline.read_bytes().split(b"\0")
        except OSError:
            continue
        if any(str(tmp_path).encode() in w for w in words):
            found.append(cmdline.parent.name if pids else " ".join(w.decode(errors="replace") for w in words))
    return found


def test_the_probes_limits_fit_in_nine_minutes_with_the_seconds_each_takes_to_stop() -> None:
    """One call of 10 minutes on a lent machine: the probes, then the report."""
    proc = subprocess.run([sys.executable, "bench/gpu_check.py", "plan"], cwd=REPO, capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    limits = {name: float(limit) for name, limit in (line.split("\t") for line in proc.stdout.splitlines())}
    assert list(limits) == PROBES
    kill_after = 5  # `timeout -k 5` in the script
    assert sum(limits.values()) + kill_after * len(limits) < 9 * 60, limits
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
    assert {"hydra", "omegaconf", "antlr4", "yaml", "packaging", "cloudpickle"} <= {p.name for p in packed.iterdir()}
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
@pytest.mark.timeout(1200)  # every probe, each a process that imports torch: over 10 minutes under load
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
    _check_fork(probes["fork"])
    # Rank 1 of a 2-rank run fails (a stand-in for NCCL's refusal): the job ends, recorded failed by sweepit naming it.
    assert probes["failing_rank"]["status"] == "failed" and probes["failing_rank"]["run_rc"] not in (0, None)
    assert probes["failing_rank"]["error"].startswith("RankFailedError: rank 1 of 2 failed: RuntimeError: ")
    # Stopped after epoch 1 and run again: it resumed there, with a straight run's metrics.
    assert probes["resume"]["statuses"] == {"straight": "completed", "stopped": "interrupted", "resumed": "completed"}
    assert probes["resume"]["resumed_after_epoch"] == ["1"] and len(probes["resume"]["metrics"][0]) == 2
    # fp16 and auto (fp32 on the CPU) each complete in the precision they name; the streamed Dataset over 2 epochs.
    assert [(probes["precision"][name]["status"], probes["precision"][name]["precision"]) for name in ("fp16", "auto")
            ] == [("completed", "fp16"), ("completed", "fp32")]
    assert probes["streamed"]["status"] == "completed" and probes["streamed"]["epochs_completed"] == 2
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
def test_a_probe_stopped_at_its_limit_keeps_what_it_measured_and_its_sweeps_stop(tmp_path: Path) -> None:
    """`shared` starts three sweeps one after the other: it saves the lone job's figures as soon as that sweep ends.
    Its limit is made to pass right then: `timeout` takes SIGALRM as its timer's end (GNU coreutils' timeout.c), and
    its SIGTERM stops the probe and the sweeps it started. The line says so, with what was measured before."""
    env = _shell(tmp_path, GPU_CHECK_PROBES="shared", GPU_CHECK_LIMIT_SCALE="10")  # of its 60 s: never reached here
    proc = subprocess.Popen(["bash", "-c", SMOKE], cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    saved: list[dict[str, Any]] = []

    def alone_saved() -> bool:
        for figures in tmp_path.glob("gpu_check.*/shared.json"):
            with contextlib.suppress(ValueError):  # read while it was written
                saved.append(json.loads(figures.read_text()))
                return True
        return False

    try:
        wait_until(alone_saved, lambda: "no figures from shared while it ran", 300, interval_s=0.05)
        limit = [pid for pid in _left_running(tmp_path, pids=True)
                 if Path(f"/proc/{pid}/cmdline").read_bytes().startswith(b"timeout\0")]
        assert len(limit) == 1, "the probe's `timeout` is gone: it ended before it saved its first figures"
        os.kill(int(limit[0]), signal.SIGALRM)
        out, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, out[-3000:]
    assert saved[0]["alone"]["status"] == "completed" and "shared_0" not in saved[0], saved[0]
    shared = _record(tmp_path)["probes"]["shared"]
    assert shared["rc"] == 124 and not shared["ok"] and shared["alone"]["status"] == "completed", shared
    assert shared["summary"].startswith("stopped at its limit of 600 s; so far: alone completed, "), shared["summary"]
    assert shared["summary"].endswith("s/epoch; the two at once did not end") and shared["log_tail"]
    wait_until(lambda: not _left_running(tmp_path), lambda: f"processes left running: {_left_running(tmp_path)}", 60)


def _check_fork(fork: dict[str, Any]) -> None:
    """The fork probe's smoke run: the `available` app in the user's environment (no NVML setting inherited from the
    probe's process) completes; `tensor`, with a CUDA context stood in, completes too, each job in a fresh
    interpreter (the driver says so): the verdict holds, as on the recorded cases."""
    assert fork["ok"], fork["summary"]
    assert fork["available"]["statuses"] == ["completed"] * 2
    assert [fork[touch]["nvml_check_at_import"] for touch in ("available", "tensor")] == ["None", "None"]
    assert fork["tensor"]["statuses"] == ["completed"] * 2
    assert [fork[touch]["fresh_interpreters"] for touch in ("available", "tensor")] == [False, True]
    assert fork["summary"].startswith("available: 2 completed; tensor: 2 completed"), fork["summary"]
    assert all(fork["recorded_cases_judged_right"].values()) and len(fork["recorded_cases_judged_right"]) == 3


def test_the_fork_verdict_takes_sweepits_own_message_for_a_recorded_job_and_torchs_for_one_that_died() -> None:
    """bench/apps/fork_cases.json: the fork probe's sweeps as recorded, with the right verdict. sweepit's message
    quotes torch's "Cannot re-initialize CUDA in forked subprocess" within the 300 characters kept."""
    sys.path.insert(0, str(REPO / "bench"))
    try:
        import gpu_check
    finally:
        sys.path.remove(str(REPO / "bench"))
    cases = json.loads(gpu_check.FORK_CASES.read_text())
    judged = {name: gpu_check.fork_verdict(case["cases"]) for name, case in cases.items() if name != "about"}
    assert {name: ok for name, (ok, _) in judged.items()} == {name: case["ok"] for name, case in cases.items()
                                                             if name != "about"}
    assert gpu_check.FORK_ERROR in cases["sweepit_recorded_the_jobs"]["cases"]["tensor"]["errors"][0]
    assert judged["jobs_died_of_the_fork"][1].endswith("wrong in tensor (died: of 'Cannot re-initialize CUDA in "
                                                       "forked subprocess')")


def test_the_failing_rank_verdict_wants_the_run_ended_failed_and_a_rank_named() -> None:
    """Its run stopped at its bound (a rank waiting in a collective for a peer that failed), completed (NCCL took two
    ranks on one GPU), failed with no rank named, then named by sweepit, and by NCCL where rank 0 failed first."""
    sys.path.insert(0, str(REPO / "bench"))
    try:
        import gpu_check
    finally:
        sys.path.remove(str(REPO / "bench"))
    base = {"run_rc": 1, "run_s": 9.0, "run_limit_s": 30, "status": "failed"}
    cases = {"hung": ({**base, "run_rc": None, "run_s": 30.0, "status": None, "error": ""}, False),
             "completed": ({**base, "run_rc": 0, "status": "completed", "error": ""}, False),
             "unnamed": ({**base, "error": "DistBackendError: NCCL error: invalid usage"}, False),
             "by_sweepit": ({**base, "error": "RankFailedError: rank 1 of 2 failed: DistBackendError: NCCL"}, True),
             "by_nccl": ({**base, "error": "DistBackendError: Duplicate GPU detected : rank 0 and rank 1 both on CUDA "
                                           "device 18000"}, True)}
    judged = {name: gpu_check.failing_rank_verdict(case) for name, (case, _) in cases.items()}
    assert {name: ok for name, (ok, _) in judged.items()} == {name: ok for name, (_, ok) in cases.items()}
    assert judged["hung"][1].startswith("did not end within 30 s") and "naming rank 1" in judged["by_sweepit"][1]


@pytest.mark.slow
@pytest.mark.tier_slow
def test_smoke_fork_probe_runs_the_apps_as_from_the_users_shell_and_judges_sweepits_message_right(
        tmp_path: Path) -> None:
    env = _shell(tmp_path, GPU_CHECK_PROBES="fork")
    proc = subprocess.run(["bash", "-c", SMOKE], cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    fork = _record(tmp_path)["probes"]["fork"]
    assert fork["rc"] == 0, fork
    _check_fork(fork)


@pytest.mark.slow
@pytest.mark.tier_slow
def test_a_run_cut_short_keeps_the_lines_of_the_probes_that_ended(tmp_path: Path) -> None:
    """The JSON and the table are written after each probe: the whole run stopped during its second probe (a lent
    machine taken back) still has the first one's line."""
    env = _shell(tmp_path, GPU_CHECK_PROBES="nvidia_smi,shared")
    proc = subprocess.Popen(["bash", "-c", SMOKE], cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True)
    try:
        table = tmp_path / "out" / "gpu_check.txt"
        wait_until(table.is_file, lambda: "no gpu_check.txt while the second probe ran", 120)
        assert proc.poll() is None, "the run ended before it could be cut short"
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the script; `timeout` runs the probe in a process group of its own
        proc.wait()
        for pid in _left_running(tmp_path, pids=True):  # `timeout` passes SIGTERM on to the probe's group
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid), signal.SIGTERM)
    record = _record(tmp_path)
    assert list(record["probes"]) == ["nvidia_smi"] and record["probes"]["nvidia_smi"]["rc"] == 1
    assert "nvidia_smi" in table.read_text()
    wait_until(lambda: not _left_running(tmp_path), lambda: f"processes left running: {_left_running(tmp_path)}", 60)


def _link_distributions(site: Path, *names: str) -> None:
    """Link `names` and what they require (their markers evaluated here, extras left out), as this venv installed
    them, into the site-packages folder of another Python: that Python then has those and nothing else."""
    import importlib.metadata

    from packaging.requirements import Requirement

    todo, done = list(names), set()
    while todo:
        dist = importlib.metadata.distribution(todo.pop())
        if dist.metadata["Name"].lower() in done:
            continue
        done.add(dist.metadata["Name"].lower())
        for top in {f.parts[0] for f in dist.files or [] if ".." not in f.parts}:
            if not (site / top).exists():
                (site / top).symlink_to(Path(str(dist.locate_file(top))))
        for text in dist.requires or []:
            req = Requirement(text)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(req.name)


@pytest.mark.slow
@pytest.mark.tier_slow
def test_pack_then_run_on_a_python_with_torch_alone(tmp_path: Path) -> None:
    """A lent machine's image, simulated: a fresh venv with torch (and what torch requires), no Hydra, PyYAML or
    packaging; the tree with what `pack` made here; the run in a network namespace of its own, so no network. This
    machine's Python and its CPU torch stand in for the image's Python 3.12 and CUDA torch. Without numpy, which sweepit
    needs and the pack cannot carry, the python probe names that fix; with it, the probes run, and the fork probe
    judges its apps run from the user's shell and the recorded cases right."""
    tree = tmp_path / "tree"
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=REPO, capture_output=True, text=True,
                            check=True, timeout=60).stdout.split()
    for name in listed:
        if (REPO / name).is_file():
            (tree / name).parent.mkdir(parents=True, exist_ok=True)
            (tree / name).write_bytes((REPO / name).read_bytes())
    bare = tmp_path / "bare"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(bare)], check=True, timeout=120)
    site = next((bare / "lib").glob("python*/site-packages"))
    _link_distributions(site, "torch")
    mnist = write_mnist_subset(tmp_path / "mnist", 100, 50)
    pack = subprocess.run(["bash", "bench/gpu_check.sh", "pack"], cwd=tree, capture_output=True, text=True,
                          env={**os.environ, "PY": sys.executable, "MNIST_ROOT": str(mnist)}, timeout=300)
    assert pack.returncode == 0, pack.stdout + pack.stderr
    python = str(bare / "bin" / "python")
    has = subprocess.run([python, "-c", "import torch, importlib.util as u; print([m for m in ('numpy', 'yaml', "
                          "'hydra', 'packaging') if u.find_spec(m)])"], capture_output=True, text=True, timeout=120)
    assert has.stdout.strip() == "[]", has.stdout + has.stderr

    def check(probes: str) -> dict[str, Any]:
        (tmp_path / probes.replace(",", "_")).mkdir()
        env = _shell(tmp_path / probes.replace(",", "_"), PY=python, GPU_CHECK_PROBES=probes)
        # `unshare -rn`: a new network namespace (only a loopback, down), as root within it.
        proc = subprocess.run(["unshare", "-rn", "bash", "bench/gpu_check.sh", "run", "--smoke"], cwd=tree, env=env,
                              capture_output=True, text=True, timeout=900)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        return _record(tmp_path / probes.replace(",", "_"))["probes"]  # type: ignore[no-any-return]

    said = check("python")["python"]
    assert not said["ok"] and said["missing"] == "numpy", said
    assert "the pack cannot carry numpy" in said["summary"] and "make gpu-pack" not in said["summary"]
    _link_distributions(site, "numpy")
    probes = check("python,fork,mnist")
    assert all(probe["ok"] for probe in probes.values()), {name: p["summary"] for name, p in probes.items()}
    _check_fork(probes["fork"])
