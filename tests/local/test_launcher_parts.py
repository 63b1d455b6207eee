"""Fast tests of the local launcher's parts: its config, worker and GPU counts, the manifest, the progress line."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.utils import instantiate

from hydra_plugins.sweepit.local_launcher import LocalLauncher
from sweepit.errors import ConfigError, ManifestError
from sweepit.local import DEFAULT_PRELOAD, preload
from sweepit.local._resources import GpuPool, resolve_n_workers, resolve_threads, visible_gpus
from sweepit.local._worker import describe_exit
from sweepit.results import is_finished, tail_lines
from sweepit.results._job_files import write_result
from sweepit.results._manifest import (
    JobEntry,
    Manifest,
    hydra_quote,
    iter_manifest,
    read_manifest,
    rerun_argv,
    write_manifest,
)
from sweepit.results._progress import Progress, format_duration

APP_CONF = Path(__file__).parent / "app" / "conf"
ROOT_CONF = Path(__file__).parents[2] / "conf"


@pytest.mark.parametrize("conf_dir", [ROOT_CONF, APP_CONF], ids=["project", "test-app"])
def test_local_launcher_config_composes_and_instantiates(conf_dir: Path) -> None:
    with initialize_config_dir(config_dir=str(conf_dir), version_base="1.3"):
        cfg = compose("config", overrides=["hydra/launcher=local"], return_hydra_config=True)
    launcher = instantiate(cfg.hydra.launcher)
    # Hydra's plugin scan executes the module again, so compare by name rather than class identity.
    assert type(launcher).__qualname__ == LocalLauncher.__qualname__
    assert set(cfg.hydra.launcher) == {
        "_target_", "n_workers", "threads_per_job", "fail_on_error", "resume", "preload", "stderr_tail_lines",
        "term_grace_s", "gpus_key", "print_summary",
    }
    if conf_dir == ROOT_CONF:
        assert launcher.options.preload == DEFAULT_PRELOAD and launcher.options.n_workers == 0
        assert launcher.options.fail_on_error


def test_project_config_defaults_to_the_local_launcher() -> None:
    with initialize_config_dir(config_dir=str(ROOT_CONF), version_base="1.3"):
        cfg = compose("config", return_hydra_config=True)
    assert cfg.hydra.launcher._target_ == "hydra_plugins.sweepit.local_launcher.LocalLauncher"


@pytest.mark.parametrize(("key", "value", "words"), [
    ("n_workers", -1, "n_workers must be 0 (auto) or a positive count, but got n_workers=-1"),
    ("threads_per_job", -1, "threads_per_job must be 0 (auto) or a positive count, but got threads_per_job=-1"),
    ("stderr_tail_lines", -2, "stderr_tail_lines must be >= 0"),
    ("term_grace_s", float("nan"), "term_grace_s must be >= 0"),
])
def test_bad_launcher_values_are_refused_with_the_rule(key: str, value: float, words: str) -> None:
    with pytest.raises(ConfigError, match=words.replace("(", r"\(").replace(")", r"\)")):
        LocalLauncher(**{key: value})  # type: ignore[arg-type]


def test_preload_imports_packages_skips_absent_modules_and_warns_on_failures(caplog: pytest.LogCaptureFixture) -> None:
    preload(["email.mime.*", "no_such_module_for_sweepit_tests", "json:loads"])
    assert "email.mime.text" in sys.modules
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 1 and warnings[0].startswith("hydra.launcher.preload: 'json:loads' failed (TypeError")


@pytest.mark.parametrize(("app_imports", "warms"), [("", False), ("import torch", True),
                                                     ("import sweepit", False),
                                                     ("from sweepit.train import run_job", True)])
def test_the_default_preload_warms_torch_only_for_an_app_that_trains_with_it(app_imports: str, warms: bool) -> None:
    """In a fresh interpreter, as a driver or packed worker is: an app without torch starts none;
    one that imported torch, or sweepit's own job (train.py: it imports torch only as a job runs), gets the
    whole list; a list of one's own is imported as given; sweepit's own per-job modules always."""
    code = ("import sys\n" + app_imports + "\n"
            "print('torch' in sys.modules)\n"
            "from sweepit.local import DEFAULT_PRELOAD, preload\n"
            "preload(DEFAULT_PRELOAD)\n"
            "print('torch' in sys.modules, 'torch._dynamo' in sys.modules, 'sweepit.train._loop' in sys.modules)\n"
            "print('sweepit.trackers' in sys.modules)\n"
            "preload(['email.mime.*'])\n"
            "print('email.mime.text' in sys.modules)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    warmed = str(warms)
    imported_torch = str(app_imports == "import torch")  # sweepit's run_job alone does not import it
    assert done.stdout.split() == [imported_torch, warmed, warmed, warmed, "True", "True"], done.stderr[-2000:]


def test_n_workers_auto_is_gpus_else_cores_per_thread_budget() -> None:
    assert resolve_n_workers(3, threads_per_job=4, n_gpus=8, n_cpus=64) == 3
    assert resolve_n_workers(0, threads_per_job=4, n_gpus=2, n_cpus=64) == 2
    assert resolve_n_workers(0, threads_per_job=4, n_gpus=0, n_cpus=16) == 4
    assert resolve_n_workers(0, threads_per_job=4, n_gpus=0, n_cpus=2) == 1
    # Auto threads: every core a worker, but never more workers than the launch has jobs.
    assert resolve_n_workers(0, threads_per_job=0, n_gpus=0, n_cpus=16) == 16
    assert resolve_n_workers(0, threads_per_job=0, n_gpus=0, n_cpus=16, n_jobs=3) == 3
    assert resolve_n_workers(0, threads_per_job=0, n_gpus=2, n_cpus=16, n_jobs=1) == 2  # GPUs: one worker each
    assert resolve_n_workers(4, threads_per_job=0, n_gpus=0, n_cpus=16, n_jobs=1) == 4  # an explicit count stays


def test_auto_threads_share_the_cores_between_the_workers() -> None:
    assert resolve_threads(0, n_workers=3, n_cpus=16) == 5
    assert resolve_threads(0, n_workers=1, n_cpus=2) == 2  # a one-job sweep gets both cores
    assert resolve_threads(0, n_workers=32, n_cpus=16) == 1
    assert resolve_threads(2, n_workers=1, n_cpus=16) == 2  # an explicit count stays


@pytest.mark.parametrize(("env", "ids"), [("0,1", ["0", "1"]), ("", []), ("-1", []), ("2, 3,-1,4", ["2", "3"]),
                                          ("GPU-abc", ["GPU-abc"])])
def test_visible_gpus_follow_cuda_visible_devices(monkeypatch: pytest.MonkeyPatch, env: str, ids: list[str]) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", env)
    assert visible_gpus() == ids


def test_gpu_pool_hands_out_whole_requests_and_refuses_impossible_ones() -> None:
    pool = GpuPool(["0", "1", "2"])
    assert pool.take(2) == ["0", "1"]
    assert pool.take(2) is None  # waits: only one left
    assert pool.take(1) == ["2"]
    pool.give(["0", "1"])
    assert pool.take(2) == ["0", "1"]
    with pytest.raises(ConfigError, match=r"trainer.gpus must be at most the 3 GPU\(s\).*job 7 sets trainer.gpus=4"):
        pool.check(7, 4, "trainer.gpus")


def test_describe_exit_names_the_signal_and_hints_at_oom() -> None:
    assert describe_exit(-11, stopped=False) == "died from signal SIGSEGV"
    assert "out-of-memory" in describe_exit(-9, stopped=False)
    assert "out-of-memory" not in describe_exit(-9, stopped=True)
    assert describe_exit(3, stopped=False).startswith("exited with code 3")


def test_tail_lines_reads_the_end_only(tmp_path: Path) -> None:
    path = tmp_path / "stderr.log"
    path.write_text("".join(f"line {i}\n" for i in range(1000)))
    assert tail_lines(path, 2) == "line 998\nline 999"
    assert tail_lines(path, 0) == "" and tail_lines(tmp_path / "missing", 5) == ""


def _manifest(tmp_path: Path) -> Manifest:
    sweep = tmp_path / "sweep"
    jobs = {n: JobEntry(num=n, overrides=[f"lr={n}"], job_dir=str(sweep / f"{n}_lr={n}")) for n in range(3)}
    return Manifest(sweep_dir=str(sweep), argv=["/py", "/app/train.py", "-m", "lr=0,1,2", "hydra.sweep.dir=old",
                                                 "hydra.launcher.resume=false"], cwd=str(tmp_path),
                    launcher="local", jobs=jobs)


def test_manifest_round_trip_and_resume_argv(tmp_path: Path) -> None:
    m = _manifest(tmp_path)
    m.jobs[1].extra = {"slurm_job_id": "123_4"}
    write_manifest(m)
    assert list(iter_manifest(Path(m.sweep_dir))[1])[1]["extra"] == {"slurm_job_id": "123_4"}
    back = read_manifest(Path(m.sweep_dir))
    assert back.jobs == m.jobs and back.argv == m.argv
    assert rerun_argv(back.argv, Path(back.sweep_dir)) == [
        "/py", "/app/train.py", "-m", "lr=0,1,2", f"hydra.sweep.dir={m.sweep_dir}", "hydra.launcher.resume=true"]


def test_resume_skips_only_finished_jobs(tmp_path: Path) -> None:
    m = _manifest(tmp_path)
    write_result(Path(m.jobs[0].job_dir), {"status": "completed"})
    write_result(Path(m.jobs[1].job_dir), {"status": "failed"})
    assert is_finished(Path(m.jobs[0].job_dir)) and not is_finished(Path(m.jobs[2].job_dir))
    assert [n for n, j in m.jobs.items() if not is_finished(Path(j.job_dir))] == [1, 2]


def test_rerun_argv_adds_multirun_and_quotes_odd_paths() -> None:
    argv = rerun_argv(["/py", "app.py", "+hydra.sweep.dir=x", "lr=0.1,0.2"], Path("/tmp/a,b"))
    assert argv == ["/py", "app.py", "-m", "lr=0.1,0.2", "hydra.sweep.dir='/tmp/a,b'", "hydra.launcher.resume=true"]
    assert hydra_quote("it's") == "'it\\'s'"


def test_missing_manifest_says_which_launchers_write_it(tmp_path: Path) -> None:
    with pytest.raises(ManifestError, match=r"must hold sweep.json.*hydra/launcher=local") as refused:
        read_manifest(tmp_path)
    # `sweepit status` reads it too: the message names both, and the commands that read any sweep.
    assert "for `sweepit status` and `sweepit resume`" in str(refused.value)
    assert f"`sweepit summary {tmp_path.absolute()}`" in str(refused.value)


class _Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_progress_line_counts_and_eta() -> None:
    clock, out = _Clock(), io.StringIO()
    p = Progress(5, stream=out, live=False, clock=clock)
    p.skip()
    p.start()
    p.start()
    assert p.eta_s() is None and "ETA ?" in p.line()
    clock.t += 10
    p.finish(1, "completed", 9.5)
    p.finish(2, "failed", 1.0)
    line = p.line()
    assert line.startswith("sweep: 3/5 done (1 failed), 1 skipped (finished before), 0 running, 2 queued")
    assert "0:10 elapsed, ETA 0:10" in line  # 2 done in 10 s, 2 left
    assert out.getvalue().splitlines()[0].startswith("job 1 completed in 9.5s | sweep: 2/5 done")


def test_live_progress_redraws_in_place_and_clears_for_output() -> None:
    out = io.StringIO()
    p = Progress(1, stream=out, live=True, clock=_Clock())
    p.start()
    p.clear()
    p.finish(0, "completed", 1.0)
    p.close()
    text = out.getvalue()
    assert text.count("\r\033[K") == 4 and text.endswith("0 queued | 0:00 elapsed, ETA 0:00\n")
    assert Progress(1, stream=io.StringIO()).live is False  # not a terminal


def test_format_duration() -> None:
    assert [format_duration(s) for s in (7, 205, 3723)] == ["0:07", "3:25", "1:02:03"]


def test_plugin_modules_import_no_torch() -> None:
    import subprocess

    code = ("import hydra_plugins.sweepit.local_launcher, sys; "
            "print(sorted(m for m in ('torch', 'sweepit.train._loop') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
