"""What a CUDA build of torch does differently on a machine without a GPU, and jaxport under it.

Every GPU user runs a CUDA build: `torch.version.cuda` is set, `torch.cuda.is_available()` is
false here, and `torch.accelerator` names CUDA even with no device. `make test-compat` runs these
tests under CUDA builds (the floor, the GPU machines' release, the newest); on the CPU wheel of
`make test` each script first answers as a CUDA build does (`AS_A_CUDA_BUILD`), where that answer
is what jaxport reads. Each runs in a process of its own: the eager frontend names PyTorch's
PrivateUse1 device once per process, and what is tested is the order of events in one process.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.compat

#: On the CPU wheel, torch's accelerator as a CUDA build without a GPU names it (under a CUDA build
#: this is what torch answers by itself).
AS_A_CUDA_BUILD = """
import torch
if torch.version.cuda is None:
    torch._C._accelerator_getAccelerator = lambda: torch.device("cuda")
assert torch.accelerator.current_accelerator() == torch.device("cuda")
assert not torch.cuda.is_available()
"""


def _run(script: str) -> None:
    code = AS_A_CUDA_BUILD + textwrap.dedent(script) + "\nprint('ok')\n"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0 and done.stdout.strip().endswith("ok"), done.stderr[-3000:]


def test_eager_frontend_leaves_torch_accelerator_on_the_machines_gpu():
    _run("""
        import jaxport
        with jaxport.eager():
            x = torch.ones(2, device="jax") * 2
        assert x.device.type == "jax" and x.cpu().tolist() == [2.0, 2.0]
        assert torch.accelerator.current_accelerator() == torch.device("cuda")
        assert torch.accelerator.device_count() == torch.cuda.device_count() == 0
        assert torch.accelerator.is_available() == torch.cuda.is_available()
        assert torch.accelerator.current_accelerator(check_available=True) is None  # no GPU here
        # answered by torch.cuda's functions, each through a function of its own (Dynamo keeps one
        # handler per function object)
        assert torch.accelerator.current_stream is not torch.cuda.current_stream
        assert torch.accelerator.memory.reset_peak_memory_stats.__name__ == "reset_peak_memory_stats"
        assert "torch.cuda" in torch.accelerator.memory_allocated.__doc__
    """)


# A Hugging Face model compiled by Inductor and by jaxport, each equal to eager PyTorch.
_COMPILE_GPT2 = """
def compile_gpt2_both_ways(tag):
    from transformers import GPT2Config, GPT2LMHeadModel
    torch.manual_seed(0)
    config = GPT2Config(vocab_size=100, n_positions=16, n_embd=16, n_layer=1, n_head=2, use_cache=False)
    model = GPT2LMHeadModel(config).eval()
    ids = torch.randint(0, 100, (1, 8), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        expected = model(ids).logits
        for backend in ("inductor", "jaxport"):
            torch._dynamo.reset()
            got = torch.compile(model, backend=backend)(ids).logits
            torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4, msg=f"{tag}, {backend}")
"""


def test_torch_compile_after_the_eager_frontend():
    """`eager()` first, then `torch.compile` with Inductor and with jaxport: Dynamo builds its
    table of handlers after jaxport pointed `torch.accelerator` at CUDA's functions."""
    _run(_COMPILE_GPT2 + """
import jaxport
with jaxport.eager():
    assert (torch.ones(2, device="jax") + 1).cpu().tolist() == [2.0, 2.0]
compile_gpt2_both_ways("after eager()")
""")


def test_torch_compile_before_and_after_the_eager_frontend():
    """Dynamo's tables built first (a compile before any eager use), then the eager frontend, then
    compiling again: the functions jaxport put on `torch.accelerator` are traced through."""
    _run(_COMPILE_GPT2 + """
compile_gpt2_both_ways("before eager()")
import jaxport
with jaxport.eager():
    assert (torch.ones(2, device="jax") * 3).cpu().tolist() == [3.0, 3.0]
compile_gpt2_both_ways("after eager()")
""")
