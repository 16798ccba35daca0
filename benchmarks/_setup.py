"""What every benchmark needs before JAX and torch start; import it first.

One thread each (JAX's and torch's pools size themselves when they start), Hugging Face
offline and quiet, warnings and exporter logs off, and the repository root on `sys.path`
so the scripts can build the test zoo's models.
"""

from __future__ import annotations

import logging
import os
import sys
import warnings

os.environ["XLA_FLAGS"] = (
    os.environ.get("XLA_FLAGS", "") + " --xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"
)
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import torch  # noqa: E402

torch.set_num_threads(1)
warnings.filterwarnings("ignore")
logging.disable(logging.WARNING)
