"""The example notebook (examples/notebook/read_a_sweep.ipynb), executed in a real Jupyter kernel as a user runs it:
from its folder in the checkout, after a sweep made there."""

from __future__ import annotations

import re
import shutil
import sys
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from sweepit_testing import REPO, run_train

NOTEBOOK = REPO / "examples" / "notebook" / "read_a_sweep.ipynb"


@pytest.mark.slow
def test_the_notebook_reads_the_newest_sweep_in_a_kernel_of_this_venv(tmp_path: Path) -> None:
    # The checkout as a user has it: the notebook in examples/notebook/, a sweep of the default task (digits) made
    # from the checkout's root into outputs/multirun/.
    folder = tmp_path / "examples" / "notebook"
    folder.mkdir(parents=True)
    shutil.copy(NOTEBOOK, folder)
    proc = run_train(["-m", "epochs=2", "optimizer=adam,sgd", "trainer.threads=1",
                      "hydra.callbacks.summary.report=false"], tmp_path, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    nb = nbformat.read(folder / NOTEBOOK.name, as_version=4)
    nb.cells.append(nbformat.v4.new_code_cell("import sys\nprint(sys.executable)"))
    # The notebook's kernelspec, python3: ipykernel's, run by the Python that runs the client (jupyter_client puts
    # it in place of the spec's `python`), as `jupyter execute` or Jupyter started from the venv do.
    NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(folder)}}).execute()

    def text(cell: nbformat.NotebookNode) -> str:
        return "".join(o.get("text") or o.get("data", {}).get("text/plain", "") for o in cell.get("outputs", []))

    code = [cell for cell in nb.cells if cell.cell_type == "code"]
    assert "2 jobs: 2 completed" in text(code[0]) and "best (maximize val_acc): job" in text(code[0])
    assert "sweep  job optimizer" in text(code[1])
    assert any("image/png" in o.get("data", {}) for o in code[3].outputs)  # the learning curves
    found = re.search(r"job \d on 359 validation samples: ([\d.]+) \(its best val_acc: ([\d.]+)\)", text(code[5]))
    assert found and found[1] == found[2], text(code[5])  # the loaded model scores as the job did
    assert text(code[-1]).strip() == sys.executable  # the kernel ran this venv's Python, not another one
