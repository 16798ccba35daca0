"""ONNX detection ops: NonMaxSuppression.

How many boxes survive depends on the values, so the op is value-dependent: the model
runs op by op and the suppression runs in NumPy on concrete arrays.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from ..registry import onnx
from ._helpers import index_dtype


def _corners(boxes: np.ndarray, center_point_box: int):
    """(y_min, x_min, y_max, x_max) of each box, in the boxes' own dtype."""
    if center_point_box:
        xc, yc, w, h = (boxes[..., k] for k in range(4))
        return yc - h / 2, xc - w / 2, yc + h / 2, xc + w / 2
    y1, x1, y2, x2 = (boxes[..., k] for k in range(4))
    return np.minimum(y1, y2), np.minimum(x1, x2), np.maximum(y1, y2), np.maximum(x1, x2)


def _suppressed(corners, best: int, others: np.ndarray, iou_threshold) -> np.ndarray:
    """Which of `others` overlap box `best` by an IoU above the threshold (boxes with no
    area never suppress)."""
    y1, x1, y2, x2 = corners
    inter_h = np.minimum(y2[best], y2[others]) - np.maximum(y1[best], y1[others])
    inter_w = np.minimum(x2[best], x2[others]) - np.maximum(x1[best], x1[others])
    overlapping = (inter_h > 0) & (inter_w > 0)
    inter = np.where(overlapping, inter_h * inter_w, 0)
    area_best = (y2[best] - y1[best]) * (x2[best] - x1[best])
    area = (y2[others] - y1[others]) * (x2[others] - x1[others])
    union = area_best + area - inter
    with np.errstate(divide="ignore", invalid="ignore"):
        iou = inter / union
    usable = overlapping & (area_best > 0) & (area > 0) & (union > 0)
    return usable & (iou > iou_threshold)


@onnx("NonMaxSuppression", since=10, value_dependent=True, static=(0, 1, 2, 3, 4))
def non_max_suppression(boxes, scores, max_output_boxes_per_class=None, iou_threshold=None,
                        score_threshold=None, *, center_point_box=0):
    """NonMaxSuppression(float boxes, float scores, int64 max_output_boxes_per_class?,
    float iou_threshold?, float score_threshold?) -> int64 selected_indices [n, 3]."""
    boxes, scores = np.asarray(boxes), np.asarray(scores)
    limit = 0 if max_output_boxes_per_class is None else np.asarray(max_output_boxes_per_class).reshape(-1)
    limit = int(limit[0]) if np.size(limit) else 0
    iou = np.asarray(0 if iou_threshold is None else iou_threshold, boxes.dtype).reshape(-1)
    iou = iou[0] if iou.size else boxes.dtype.type(0)
    min_score = None if score_threshold is None else np.asarray(score_threshold).reshape(-1)
    min_score = None if min_score is None or not min_score.size else min_score[0]
    selected = []
    for b in range(scores.shape[0]):
        corners = _corners(boxes[b], center_point_box)
        for c in range(scores.shape[1]):
            class_scores = scores[b, c]
            # Highest score first; among equal scores, the lower box index.
            candidates = np.argsort(-class_scores, kind="stable")
            if min_score is not None:
                candidates = candidates[class_scores[candidates] > min_score]
            kept = 0
            while candidates.size and kept < limit:
                best, candidates = candidates[0], candidates[1:]
                selected.append((b, c, best))
                kept += 1
                candidates = candidates[~_suppressed(corners, best, candidates, iou)]
    return jnp.asarray(np.asarray(selected, np.int64).reshape(-1, 3), index_dtype())
