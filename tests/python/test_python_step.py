"""bench/python_step.py, the plain-PyTorch step keycld's speed is measured against, computes the
same loss and gradients as keycld's SequenceLoss (else the comparison would be void)."""

import importlib.util

import torch

from conftest import ROOT


def load_python_step():
    spec = importlib.util.spec_from_file_location("python_step", ROOT / "bench" / "python_step.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_python_step_is_keyclds_step(tiny):
    step = load_python_step()
    torch.set_num_threads(1)
    worst_loss, worst_gradient = step.check_against(tiny["run"])
    assert worst_loss < 1e-6  # measured: 0 (bit-identical)
    assert worst_gradient < 1e-5  # measured: 5e-7


def test_the_python_dihedral_transforms_invert():
    step = load_python_step()
    image = torch.arange(2 * 4 * 4, dtype=torch.float32).view(2, 4, 4)
    for t in range(8):
        assert torch.equal(step.dihedral_inverse(step.dihedral(image, t), t), image)
    assert len({tuple(step.dihedral(image, t).flatten().tolist()) for t in range(8)}) == 8
