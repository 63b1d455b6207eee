"""Real training sweeps through hydra/launcher=slurm: one job array, per-task ranks and GPUs, the summary."""

from __future__ import annotations

from pathlib import Path

from slurm_launcher_testing import LINREG, TRAIN, job_dirs, manifest, result, run, tasks


def test_four_job_sweep_is_one_array_and_ends_with_the_results_table(tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    proc = run(TRAIN, sweep, *LINREG, "optimizer=adam,sgd", "lr=0.01,0.1")
    assert proc.returncode == 0, proc.stderr
    assert "4 jobs: 4 completed" in proc.stdout and f"sweep directory: {sweep}" in proc.stdout
    assert "best (minimize val_loss)" in proc.stdout
    m = manifest(sweep)
    assert m.launcher == "slurm"
    entries = [m.jobs[n] for n in range(4)]
    assert [e.state for e in entries] == ["completed"] * 4
    arrays = {e.extra["slurm_array_job_id"] for e in entries}
    assert len(arrays) == 1, "same resources: one sbatch call"
    assert [e.extra["slurm_array_index"] for e in entries] == [0, 1, 2, 3]
    assert [p.name for p in (sweep / ".submitit").iterdir()] == ["0001"]
    dirs = job_dirs(sweep)
    for num, d in dirs.items():
        assert result(d)["status"] == "completed"
        assert "Epoch 2/2" in (d / "stdout.log").read_text()  # a link to the job's Slurm log
        assert (d / "stdout.log").resolve() == Path(m.jobs[num].extra["stdout"])


def test_gpu_counts_1_2_4_give_each_task_its_rank_and_one_gpu(tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    proc = run(TRAIN, sweep, *LINREG, "trainer.gpus=1,2,4")
    assert proc.returncode == 0, proc.stderr
    m = manifest(sweep)
    assert len({e.extra["slurm_array_job_id"] for e in m.jobs.values()}) == 3, "one sbatch call per shape"
    for num, n_gpus in enumerate((1, 2, 4)):
        job_dir = Path(m.jobs[num].job_dir)
        records = tasks(job_dir)
        assert [(r["slurm_procid"], r["slurm_localid"], r["slurm_ntasks"]) for r in records] == [
            (str(rank), str(rank), str(n_gpus)) for rank in range(n_gpus)]
        devices = [r["cuda_visible_devices"] for r in records]
        assert all(d in {"0", "1", "2", "3"} for d in devices), devices  # one GPU each ...
        assert len(set(devices)) == n_gpus, devices                       # ... and not the same one
        assert {r["slurm_step_id"] for r in records} == {"0"}  # srun's step: what sweepit.train._distributed needs
        outcome = result(job_dir)
        assert (outcome["status"], outcome["world_size"], outcome["device"]) == ("completed", n_gpus, "cpu")
        script = next(Path(m.jobs[num].extra["submitit_folder"]).glob("*_submission.sh")).read_text()
        for line in (f"--ntasks-per-node={n_gpus}", f"--gpus-per-node={n_gpus}", "--gpus-per-task=1",
                     "--nodes=1", "--time=5"):
            assert f"#SBATCH {line}\n" in script
    # the GPU-scaling study's table, from the sweep's report (one point per GPU count), of CPU ranks: the cluster's
    # GPUs are names in Slurm's gres, and the ranks trained on CPU
    html = (sweep / "report" / "index.html").read_text()
    assert "Scaling over CPU ranks" in html and "efficiency" in html and "scaling.png" not in html  # embedded
