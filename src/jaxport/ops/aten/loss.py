"""ATen lowerings: loss functions and the distances they use.

`reduction` is PyTorch's enum: 0 none, 1 mean, 2 sum. Losses compute in
float32 for float16/bfloat16 inputs and return the input dtype. Class
dimensions are 1 (0 for an unbatched input), as in PyTorch.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp

from ..registry import aten, custom
from ._promotion import float_type, opmath_type, real_type, result_type
from .norms import p_norm


def _reduce(loss, reduction):
    if reduction == 1:
        return jnp.mean(loss)
    if reduction == 2:
        return jnp.sum(loss)
    return loss


def _prepare(*tensors):
    """Tensors promoted together, in compute precision; plus the output dtype."""
    dtype = float_type(result_type(*tensors))
    compute = opmath_type(dtype)
    return [None if t is None else t.astype(compute) for t in tensors], dtype


def _pairwise_distance(x1, x2, p, eps, keepdim):
    """PyTorch's composite `norm(x1 - x2 + eps, p, -1)`: the difference is taken in the
    inputs' common dtype (integers wrap), then made float with eps added; the norm
    accumulates in opmath and is rounded back."""
    ndim = max(x1.ndim, x2.ndim)
    dtype = float_type(result_type(x1, x2))
    diff = (x1 - x2).astype(dtype) + jnp.asarray(eps, dtype)
    if ndim == 0:
        return jnp.abs(diff)
    return p_norm(diff.astype(opmath_type(diff.dtype)), p, ndim - 1, keepdim).astype(real_type(diff.dtype))


def _nll(logp, target, weight, reduction, ignore_index):
    """(loss, total_weight) of the negative log likelihood; logp is in compute precision."""
    class_dim = 0 if logp.ndim == 1 else 1
    valid = target != ignore_index
    safe = jnp.where(valid, target, 0).astype(jnp.int64)
    picked = jnp.take_along_axis(logp, jnp.expand_dims(safe, class_dim), axis=class_dim)
    picked = jnp.squeeze(picked, class_dim)
    w = jnp.ones((), logp.dtype) if weight is None else weight.astype(logp.dtype)[safe]
    w = jnp.where(valid, w, jnp.zeros((), logp.dtype))
    loss = -picked * w
    if reduction == 0:
        return loss, jnp.zeros((), logp.dtype)
    total = jnp.sum(jnp.broadcast_to(w, loss.shape))
    if reduction == 1:
        return jnp.sum(loss) / total, total
    return jnp.sum(loss), total


@aten("binary_cross_entropy.default")
def aten_binary_cross_entropy(self, target, weight=None, reduction=1):
    """binary_cross_entropy(Tensor self, Tensor target, Tensor? weight=None, int reduction=1) -> Tensor"""
    (x, t, w), dtype = _prepare(self, target, weight)
    log_x = jnp.maximum(jnp.log(x), -100)
    log_1mx = jnp.maximum(jnp.log1p(-x), -100)
    loss = (t - 1) * log_1mx - t * log_x
    if w is not None:
        loss = loss * w
    return _reduce(loss, reduction).astype(dtype)


@aten("binary_cross_entropy_with_logits.default")
def aten_binary_cross_entropy_with_logits(self, target, weight=None, pos_weight=None, reduction=1):
    """binary_cross_entropy_with_logits(Tensor self, Tensor target, Tensor? weight=None, Tensor? pos_weight=None, int reduction=1) -> Tensor"""
    (x, t, w, pw), dtype = _prepare(self, target, weight, pos_weight)
    softplus_neg = jnp.log1p(jnp.exp(-jnp.abs(x))) + jnp.maximum(-x, 0)
    log_weight = 1 if pw is None else (pw - 1) * t + 1
    loss = (1 - t) * x + log_weight * softplus_neg
    if w is not None:
        loss = loss * w
    return _reduce(loss, reduction).astype(dtype)


@aten("cosine_embedding_loss.default")
def aten_cosine_embedding_loss(input1, input2, target, margin=0.0, reduction=1):
    """cosine_embedding_loss(Tensor input1, Tensor input2, Tensor target, float margin=0., int reduction=1) -> Tensor"""
    (x1, x2), dtype = _prepare(input1, input2)
    axis = target.ndim
    prod = jnp.sum(x1 * x2, axis=axis)
    mag1 = jnp.sum(x1 * x1, axis=axis) + 1e-12
    mag2 = jnp.sum(x2 * x2, axis=axis) + 1e-12
    cos = prod / jnp.sqrt(mag1 * mag2)
    zero = jnp.zeros_like(cos)
    if target.dtype == jnp.bool_:  # True compares equal to 1, nothing to -1
        target = target.astype(jnp.int8)
    loss = jnp.where(target == 1, 1 - cos, zero) + jnp.where(
        target == -1, jnp.maximum(cos - margin, 0), zero
    )
    return _reduce(loss, reduction).astype(dtype)


@aten("cosine_similarity.default")
def aten_cosine_similarity(x1, x2, dim=1, eps=1e-08):
    """cosine_similarity(Tensor x1, Tensor x2, int dim=1, float eps=1e-08) -> Tensor"""
    (a, b), dtype = _prepare(x1, x2)
    a, b = jnp.broadcast_arrays(a, b)
    if a.ndim == 0:
        a, b, dim = a[None], b[None], 0
    eps = jnp.asarray(eps, a.dtype)
    na = jnp.maximum(p_norm(a, 2, dim, True), eps)
    nb = jnp.maximum(p_norm(b, 2, dim, True), eps)
    return jnp.sum((a / na) * (b / nb), axis=dim).astype(dtype)


@aten("cross_entropy_loss.default")
def aten_cross_entropy_loss(
    self, target, weight=None, reduction=1, ignore_index=-100, label_smoothing=0.0
):
    """cross_entropy_loss(Tensor self, Tensor target, Tensor? weight=None, int reduction=1, SymInt ignore_index=-100, float label_smoothing=0.) -> Tensor"""
    compute = opmath_type(self.dtype)
    class_dim = 0 if self.ndim == 1 else 1
    n_classes = self.shape[class_dim]
    logp = jax.nn.log_softmax(self.astype(compute), axis=class_dim)
    wshape = [1] * self.ndim
    wshape[class_dim] = n_classes
    w = None if weight is None else weight.astype(compute).reshape(wshape)
    if jnp.issubdtype(target.dtype, jnp.floating):
        t = target.astype(compute)
        if label_smoothing > 0:
            t = t * (1 - label_smoothing) + label_smoothing / n_classes
        prod = logp * t if w is None else logp * t * w
        if reduction == 0:
            return (-jnp.sum(prod, axis=class_dim)).astype(self.dtype)
        total = -jnp.sum(prod)
        if reduction == 1:
            total = (
                total / (self.size // n_classes) if self.size else jnp.full((), jnp.nan, compute)
            )
        return total.astype(self.dtype)
    nll, _ = _nll(logp, target, weight, reduction, ignore_index)
    if label_smoothing <= 0:
        return nll.astype(self.dtype)
    ignored = target == ignore_index
    smooth = -jnp.sum(logp if w is None else logp * w, axis=class_dim)
    smooth = jnp.where(ignored, jnp.zeros((), compute), smooth)
    if reduction == 1:
        if weight is None:
            denom = jnp.sum(~ignored).astype(compute)
        else:
            picked = weight.astype(compute)[jnp.where(ignored, 0, target).astype(jnp.int64)]
            denom = jnp.sum(jnp.where(ignored, jnp.zeros((), compute), picked))
        smooth = jnp.sum(smooth) / denom
    elif reduction == 2:
        smooth = jnp.sum(smooth)
    return ((1 - label_smoothing) * nll + smooth * (label_smoothing / n_classes)).astype(self.dtype)


@aten("hinge_embedding_loss.default")
def aten_hinge_embedding_loss(self, target, margin=1.0, reduction=1):
    """hinge_embedding_loss(Tensor self, Tensor target, float margin=1., int reduction=1) -> Tensor"""
    (x, t), dtype = _prepare(self, target)
    zero = jnp.zeros((), x.dtype)
    loss = jnp.where(t != 1, jnp.maximum(margin - x, 0), zero) + jnp.where(t != -1, x, zero)
    return _reduce(loss, reduction).astype(dtype)


@aten("huber_loss.default")
def aten_huber_loss(self, target, reduction=1, delta=1.0):
    """huber_loss(Tensor self, Tensor target, int reduction=1, float delta=1.) -> Tensor"""
    (x, t), dtype = _prepare(self, target)
    z = jnp.abs(x - t)
    loss = jnp.where(z < delta, 0.5 * z * z, delta * (z - 0.5 * delta))
    return _reduce(loss, reduction).astype(dtype)


@aten("kl_div.default")
def aten_kl_div(self, target, reduction=1, *, log_target=False):
    """kl_div(Tensor self, Tensor target, int reduction=1, *, bool log_target=False) -> Tensor"""
    (x, t), dtype = _prepare(self, target)
    if log_target:
        loss = jnp.exp(t) * (t - x)
    else:
        loss = jax.scipy.special.xlogy(t, t) - t * x
    return _reduce(loss, reduction).astype(dtype)


@aten("l1_loss.default")
def aten_l1_loss(self, target, reduction=1):
    """l1_loss(Tensor self, Tensor target, int reduction=1) -> Tensor"""
    (x, t), dtype = _prepare(self, target)
    return _reduce(jnp.abs(x - t), reduction).astype(real_type(dtype))  # a modulus for complex inputs


@aten("margin_ranking_loss.default")
def aten_margin_ranking_loss(input1, input2, target, margin=0.0, reduction=1):
    """margin_ranking_loss(Tensor input1, Tensor input2, Tensor target, float margin=0., int reduction=1) -> Tensor"""
    common = result_type(input1, input2, target)
    if jnp.issubdtype(common, jnp.integer):
        # PyTorch's composite negates and multiplies in the integer dtype (wrapping), then adds
        # the float margin.
        x1, x2, t = (x.astype(common) for x in (input1, input2, target))
        return _reduce(jnp.maximum((-t * (x1 - x2)).astype(float_type(common)) + margin, 0), reduction)
    (x1, x2, t), dtype = _prepare(input1, input2, target)
    return _reduce(jnp.maximum(-t * (x1 - x2) + margin, 0), reduction).astype(dtype)


@aten("mse_loss.default")
def aten_mse_loss(self, target, reduction=1):
    """mse_loss(Tensor self, Tensor target, int reduction=1) -> Tensor"""
    (x, t), dtype = _prepare(self, target)
    return _reduce(jnp.square(x - t), reduction).astype(dtype)


@aten("multi_margin_loss.default")
def aten_multi_margin_loss(self, target, p=1, margin=1, weight=None, reduction=1):
    """multi_margin_loss(Tensor self, Tensor target, Scalar p=1, Scalar margin=1, Tensor? weight=None, int reduction=1) -> Tensor"""
    compute = opmath_type(self.dtype)
    x = self.astype(compute)
    x2 = x.reshape(-1, x.shape[-1]) if x.ndim else x.reshape(1, 1)
    t = target.reshape(-1).astype(jnp.int64)
    n_classes = x2.shape[1]
    xy = jnp.take_along_axis(x2, t[:, None], axis=1)
    z = jnp.maximum(margin - xy + x2, 0)
    if p == 2:
        z = z * z
    if weight is not None:
        z = z * weight.astype(compute)[t][:, None]
    z = jnp.where(jnp.arange(n_classes)[None, :] == t[:, None], jnp.zeros((), compute), z)
    loss = jnp.sum(z, axis=1) / n_classes
    if reduction == 0:
        loss = loss.reshape(target.shape)
    return _reduce(loss, reduction).astype(self.dtype)


@aten("multilabel_margin_loss.default")
def aten_multilabel_margin_loss(self, target, reduction=1):
    """multilabel_margin_loss(Tensor self, Tensor target, int reduction=1) -> Tensor"""
    return aten_multilabel_margin_loss_forward(self, target, reduction)[0]


@aten("multilabel_margin_loss_forward.default")
def aten_multilabel_margin_loss_forward(self, target, reduction):
    """multilabel_margin_loss_forward(Tensor self, Tensor target, int reduction) -> (Tensor output, Tensor is_target)"""
    compute = opmath_type(self.dtype)
    x = self.astype(compute)
    x2 = x.reshape(-1, x.shape[-1]) if x.ndim else x.reshape(1, 1)
    t2 = target.reshape(x2.shape).astype(jnp.int64)
    n_classes = x2.shape[1]
    # Labels run up to the first -1.
    labelled = jnp.cumprod((t2 >= 0).astype(jnp.int32), axis=1).astype(bool)
    safe = jnp.where(labelled, t2, 0)
    classes = jnp.arange(n_classes)
    is_target = jnp.any(labelled[:, :, None] & (safe[:, :, None] == classes[None, None, :]), axis=1)
    xj = jnp.take_along_axis(x2, safe, axis=1)
    hinge = jnp.maximum(1 - (xj[:, :, None] - x2[:, None, :]), 0)
    hinge = jnp.where(labelled[:, :, None] & ~is_target[:, None, :], hinge, jnp.zeros((), compute))
    loss = jnp.sum(hinge, axis=(1, 2)) / n_classes
    if reduction == 0:
        loss = loss.reshape(self.shape[:-1]) if self.ndim > 1 else loss.reshape(())
    return _reduce(loss, reduction).astype(self.dtype), is_target.reshape(target.shape).astype(
        self.dtype
    )


@aten("nll_loss.default", "nll_loss_nd.default", "nll_loss2d.default")
def aten_nll_loss(self, target, weight=None, reduction=1, ignore_index=-100):
    """nll_loss(Tensor self, Tensor target, Tensor? weight=None, int reduction=1, SymInt ignore_index=-100) -> Tensor"""
    return _nll(self.astype(opmath_type(self.dtype)), target, weight, reduction, ignore_index)[
        0
    ].astype(self.dtype)


@aten("nll_loss_forward.default", "nll_loss2d_forward.default")
def aten_nll_loss_forward(self, target, weight, reduction, ignore_index):
    """nll_loss_forward(Tensor self, Tensor target, Tensor? weight, int reduction, SymInt ignore_index) -> (Tensor output, Tensor total_weight)"""
    loss, total = _nll(
        self.astype(opmath_type(self.dtype)), target, weight, reduction, ignore_index
    )
    return loss.astype(self.dtype), total.astype(self.dtype)


@aten("pairwise_distance.default")
def aten_pairwise_distance(x1, x2, p=2.0, eps=1e-06, keepdim=False):
    """pairwise_distance(Tensor x1, Tensor x2, float p=2., float eps=9.9999999999999995e-07, bool keepdim=False) -> Tensor"""
    common = result_type(x1, x2)
    return _pairwise_distance(x1.astype(common), x2.astype(common), p, eps, keepdim)


@aten("poisson_nll_loss.default")
def aten_poisson_nll_loss(input, target, log_input, full, eps, reduction):
    """poisson_nll_loss(Tensor input, Tensor target, bool log_input, bool full, float eps, int reduction) -> Tensor"""
    (x, t), dtype = _prepare(input, target)
    if log_input:
        loss = jnp.exp(x) - t * x
    else:
        loss = x - t * jnp.log(x + eps)
    if full:
        stirling = t * jnp.log(t) - t + 0.5 * jnp.log(2 * math.pi * t)
        loss = loss + jnp.where(t <= 1, jnp.zeros((), x.dtype), stirling)
    return _reduce(loss, reduction).astype(dtype)


@aten("smooth_l1_loss.default")
def aten_smooth_l1_loss(self, target, reduction=1, beta=1.0):
    """smooth_l1_loss(Tensor self, Tensor target, int reduction=1, float beta=1.) -> Tensor"""
    (x, t), dtype = _prepare(self, target)
    z = jnp.abs(x - t)
    if beta == 0:
        loss = z
    else:
        loss = jnp.where(z < beta, 0.5 * z * z / beta, z - 0.5 * beta)
    return _reduce(loss, reduction).astype(dtype)


@aten("soft_margin_loss.default")
def aten_soft_margin_loss(self, target, reduction=1):
    """soft_margin_loss(Tensor self, Tensor target, int reduction=1) -> Tensor"""
    # Composite in PyTorch: each elementwise step rounds to the input dtype (exp overflows
    # to inf in float16 as it does there); the mean/sum accumulate in opmath.
    (x, t), dtype = _prepare(self, target)
    x, t = x.astype(dtype), t.astype(dtype)
    return _reduce(jnp.log1p(jnp.exp(-(x * t))), reduction).astype(dtype)


@aten("triplet_margin_loss.default")
def aten_triplet_margin_loss(
    anchor, positive, negative, margin=1.0, p=2.0, eps=1e-06, swap=False, reduction=1
):
    """triplet_margin_loss(Tensor anchor, Tensor positive, Tensor negative, float margin=1., float p=2., float eps=9.9999999999999995e-07, bool swap=False, int reduction=1) -> Tensor"""
    # Composite in PyTorch: distances and the margin arithmetic round to the input dtype.
    common = result_type(anchor, positive, negative)
    dtype = real_type(float_type(common))  # distances of complex vectors are real
    a, pos, neg = (x.astype(common) for x in (anchor, positive, negative))
    d_pos = _pairwise_distance(a, pos, p, eps, False)
    d_neg = _pairwise_distance(a, neg, p, eps, False)
    if swap:
        d_neg = jnp.minimum(d_neg, _pairwise_distance(pos, neg, p, eps, False))
    loss = jnp.maximum(margin + d_pos - d_neg, jnp.zeros((), dtype))
    return _reduce(loss, reduction).astype(dtype)


# -- other libraries' ops -------------------------------------------------------------------------


def _linear_cross_entropy(input, linear_weight, target, linear_bias, weight, reduction, ignore_index,
                          label_smoothing):
    """cross_entropy(linear(input, linear_weight, linear_bias), target, ...) over rows of
    `input` (N, in), classes in `linear_weight` (C, in); summed in float32 for 16-bit inputs."""
    compute = opmath_type(input.dtype)
    logits = jnp.matmul(input.astype(compute), linear_weight.astype(compute).T)
    if linear_bias is not None:
        logits = logits + linear_bias.astype(compute)
    return aten_cross_entropy_loss(logits, target, weight, reduction, ignore_index, label_smoothing)


_REDUCTIONS = {"none": 0, "mean": 1, "sum": 2}


@custom("torch_nn", "_linear_cross_entropy_batch_chunked.default")
def torch_nn_linear_cross_entropy_batch_chunked(
    input, linear_weight, target, linear_bias, weight, reduction, ignore_index, label_smoothing,
    batch_chunk_size, acc_policy, acc_dtype, allow_retain_graph, compute_input_grad,
    compute_linear_weight_grad, compute_linear_bias_grad,
):
    """_linear_cross_entropy_batch_chunked(Tensor input, Tensor linear_weight, Tensor target, Tensor? linear_bias, Tensor? weight, str reduction, SymInt ignore_index, float label_smoothing, SymInt batch_chunk_size, str acc_policy, ScalarType acc_dtype, bool allow_retain_graph, bool compute_input_grad, bool compute_linear_weight_grad, bool compute_linear_bias_grad) -> (Tensor, Tensor, Tensor, Tensor)

    PyTorch's chunked `F.linear_cross_entropy` (mean or sum): the loss and, precomputed for its
    backward, the gradients of the loss in the operands asked for (empty where not). Chunking
    only bounds PyTorch's memory; XLA fuses the whole product, so the loss is computed at once.
    """
    def loss(x, w, b):
        return _linear_cross_entropy(x, w, target, b, weight, _REDUCTIONS[reduction], ignore_index,
                                     label_smoothing)

    value, grads = jax.value_and_grad(loss, argnums=(0, 1, 2))(input, linear_weight, linear_bias)
    dtype = input.dtype  # every output's, as PyTorch allocates them
    return (
        value.astype(dtype),
        grads[0].astype(dtype) if compute_input_grad else jnp.zeros((0, 0), dtype),
        grads[1].astype(dtype) if compute_linear_weight_grad else jnp.zeros((0, 0), dtype),
        grads[2].astype(dtype) if compute_linear_bias_grad and linear_bias is not None
        else jnp.zeros((0,), dtype),
    )


@custom("torch_nn", "_linear_cross_entropy_batch_chunked_no_reduction.default")
def torch_nn_linear_cross_entropy_batch_chunked_no_reduction(
    input, linear_weight, target, linear_bias, weight, ignore_index, batch_chunk_size, acc_policy,
    acc_dtype,
):
    """_linear_cross_entropy_batch_chunked_no_reduction(Tensor input, Tensor linear_weight, Tensor target, Tensor? linear_bias, Tensor? weight, SymInt ignore_index, SymInt batch_chunk_size, str acc_policy, ScalarType acc_dtype) -> Tensor

    PyTorch's chunked `F.linear_cross_entropy(..., reduction="none")`: each row's loss."""
    return _linear_cross_entropy(input, linear_weight, target, linear_bias, weight, 0, ignore_index,
                                 0.0).astype(input.dtype)
