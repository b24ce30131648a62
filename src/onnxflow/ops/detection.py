"""Object detection: NonMaxSuppression (10, 11)."""

from __future__ import annotations

import numpy as np

from onnxflow.ops.registry import op


def _corners(boxes: np.ndarray, center_point_box: int) -> np.ndarray:
    """Return boxes as (y_min, x_min, y_max, x_max), whatever corner order they came in."""
    b = boxes.astype(np.float64)
    if center_point_box == 1:
        xc, yc, w, h = np.moveaxis(b, -1, 0)
        return np.stack([yc - h / 2, xc - w / 2, yc + h / 2, xc + w / 2], axis=-1)
    if center_point_box != 0:
        raise ValueError(f"center_point_box must be 0 or 1, found {center_point_box}")
    y1, x1, y2, x2 = np.moveaxis(b, -1, 0)
    return np.stack(
        [np.minimum(y1, y2), np.minimum(x1, x2), np.maximum(y1, y2), np.maximum(x1, x2)], axis=-1
    )


def _iou(box: np.ndarray, others: np.ndarray) -> np.ndarray:
    """Intersection over union of one corner box with each of ``others``; 0 when disjoint."""
    low = np.maximum(box[:2], others[:, :2])
    high = np.minimum(box[2:], others[:, 2:])
    inter = np.prod(np.clip(high - low, 0, None), axis=1)
    area = np.prod(box[2:] - box[:2])
    areas = np.prod(others[:, 2:] - others[:, :2], axis=1)
    union = area + areas - inter
    return np.where((inter > 0) & (union > 0), inter / np.where(union > 0, union, 1), 0.0)


def _scalar(value: np.ndarray | None, default: float) -> float:
    return default if value is None or value.size == 0 else float(value.reshape(-1)[0])


@op("NonMaxSuppression", 10, 11)
def non_max_suppression(
    boxes: np.ndarray,
    scores: np.ndarray,
    max_output_boxes_per_class: np.ndarray | None = None,
    iou_threshold: np.ndarray | None = None,
    score_threshold: np.ndarray | None = None,
    *,
    center_point_box: int = 0,
) -> np.ndarray:
    """Greedy per-class selection by descending score; rows are (batch, class, box) int64."""
    if boxes.ndim != 3 or boxes.shape[2] != 4 or scores.ndim != 3:
        raise ValueError(
            f"boxes must be (batches, boxes, 4) and scores (batches, classes, boxes), found "
            f"{boxes.shape} and {scores.shape}"
        )
    if scores.shape[0] != boxes.shape[0] or scores.shape[2] != boxes.shape[1]:
        raise ValueError(f"scores {scores.shape} do not match boxes {boxes.shape}")
    limit = int(_scalar(max_output_boxes_per_class, 0))
    overlap = _scalar(iou_threshold, 0.0)
    floor = _scalar(score_threshold, -np.inf)
    corners = _corners(boxes, center_point_box)
    rows = []
    for b, c in np.ndindex(*scores.shape[:2]):
        s = scores[b, c]
        order = np.argsort(-s.astype(np.float64), kind="stable")
        order = order[s[order] >= floor]
        picked = 0
        while order.size and picked < limit:
            best, order = order[0], order[1:]
            rows.append((b, c, best))
            picked += 1
            order = order[_iou(corners[b, best], corners[b, order]) <= overlap]
    return np.array(rows, dtype=np.int64).reshape(-1, 3)
