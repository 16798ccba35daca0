"""ONNX losses: NegativeLogLikelihoodLoss, SoftmaxCrossEntropyLoss"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from ..registry import onnx


def _nll(log_prob, target, weight, ignore_index, reduction: str):
    """Loss of log-probabilities [N, C, d1..dk] against class indices [N, d1..dk]."""
    if reduction not in ("none", "sum", "mean"):
        raise ValueError(f"reduction must be 'none', 'sum' or 'mean', not {reduction!r}")
    log_prob = jnp.asarray(log_prob)
    target = jnp.asarray(target)
    kept = (target != ignore_index) if ignore_index is not None else jnp.ones(target.shape, bool)
    # An ignored target may lie outside [0, C) (negative, too high): gather a valid class instead.
    classes = jnp.where(kept, target, 0)
    picked = jnp.take_along_axis(log_prob, jnp.expand_dims(classes, 1), axis=1).squeeze(1)
    if weight is None:
        w = kept.astype(log_prob.dtype)
    else:
        w = jnp.where(kept, jnp.take(jnp.asarray(weight), classes), 0)
    loss = -picked * w
    if reduction == "none":
        return loss
    if reduction == "sum":
        return jnp.sum(loss)
    return jnp.sum(loss) / jnp.sum(w)


@onnx("NegativeLogLikelihoodLoss", since=12)
def negative_log_likelihood_loss(input, target, weight=None, *, ignore_index=None,
                                 reduction="mean"):
    """NegativeLogLikelihoodLoss(T input, Tind target, T weight?) -> T loss; reduction
    none/sum/mean (mean divides by the summed weights of the targets not ignored)."""
    return _nll(input, target, weight, ignore_index, reduction)


@onnx("SoftmaxCrossEntropyLoss", since=12)
def softmax_cross_entropy_loss(scores, labels, weights=None, *, ignore_index=None,
                               reduction="mean"):
    """SoftmaxCrossEntropyLoss(T scores, Tind labels, T weights?) -> (T output, T log_prob);
    NegativeLogLikelihoodLoss of LogSoftmax over the class axis 1."""
    scores = jnp.asarray(scores)
    if scores.dtype in (jnp.float16, jnp.bfloat16):
        # Half precision loses bits in the exp-sum; one rounding at the end matches float32 math.
        wide = jax.nn.log_softmax(scores.astype(jnp.float32), axis=1)
        weights = None if weights is None else jnp.asarray(weights).astype(jnp.float32)
        loss = _nll(wide, labels, weights, ignore_index, reduction)
        return loss.astype(scores.dtype), wide.astype(scores.dtype)
    log_prob = jax.nn.log_softmax(scores, axis=1)
    return _nll(log_prob, labels, weights, ignore_index, reduction), log_prob
