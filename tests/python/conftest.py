"""Fixtures of the Python tests: the CLI, and a tiny data set and run made with it.

Run by ctest (python.pytest) with PYTHONPATH=build/python and KEYCLD_CLI set; by hand:
    PYTHONPATH=build/python /usr/bin/python3 -m pytest tests/python
"""

import json
import os
import pathlib
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
CLI = pathlib.Path(os.environ.get("KEYCLD_CLI", ROOT / "build" / "keycld"))


def run_cli(*args):
    """Runs the keycld CLI; returns its output, failing the test on a non-zero status."""
    p = subprocess.run([str(CLI), *map(str, args)], capture_output=True, text=True)
    assert p.returncode == 0, f"keycld {' '.join(map(str, args))} failed:\n{p.stdout}{p.stderr}"
    return p.stdout + p.stderr


@pytest.fixture(scope="session")
def tiny(tmp_path_factory):
    """A 6-run, 10-frame, 16-px pendulum data set (seed 3) and a run trained 6 steps on it with
    the CLI (1 thread, h = 8, loose Dormand–Prince tolerances), evaluated and predicted by the
    CLI. Returns a dict of paths."""
    d = tmp_path_factory.mktemp("tiny")
    run_cli("generate", "--runs", 6, "--frames", 10, "--size", 16, "--seed", 3, "--workers", 1,
            "--out", d)
    data = d / "pendulum-none-16px-6x10-seed3.h5"
    assert data.exists()
    config = d / "tiny.toml"
    config.write_text("[model]\nhidden = 8\n[train]\nlr = 3e-3\nthreads = 1\n"
                      "[eval]\nval_runs = 1\nrtol = 1e-6\natol = 1e-6\n")
    run = d / "run"
    run_cli("train", "--config", config, "--data", data, "--out", run, "--steps", 6,
            "--threads", 1)
    run_cli("evaluate", run, "--threads", 1, "--no-plots", "--energy-frames", 20)
    run_cli("predict", run, "--run", 0, "--frames", 14, "--threads", 1, "--scale", 1)
    return {"dir": d, "data": data, "config": config, "run": run,
            "evaluation": json.loads((run / "report" / "evaluation.json").read_text()),
            "predict_csv": run / "report" / "predict-run0.csv"}


@pytest.fixture(scope="session")
def tiny_full(tiny):
    """As `tiny`, on fully actuated data (control mode full): a run energy shaping accepts."""
    d = tiny["dir"]
    run_cli("generate", "--control", "full", "--runs", 6, "--frames", 10, "--size", 16,
            "--seed", 3, "--workers", 1, "--out", d)
    run = d / "run-full"
    run_cli("train", "--config", tiny["config"], "--data",
            d / "pendulum-full-16px-6x10-seed3.h5", "--out", run, "--steps", 3, "--threads", 1)
    return run
