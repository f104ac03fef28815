"""Attacks read off a gradient in closed form.

A fully connected layer y = W x + b has ∂L/∂W = (∂L/∂y) xᵀ and ∂L/∂b = ∂L/∂y [Phong et al., TIFS 2018], so
row i of ∂L/∂W divided by (∂L/∂b)_i is x itself for one input, and for a batch the mix
Σ_n (∂L/∂y_n)_i x_n / Σ_n (∂L/∂y_n)_i of its inputs.

With cross-entropy on one example, ∂L/∂logits = softmax − onehot is negative at the true label only [iDLG,
Zhao et al. 2020]: the bias gradient's only negative entry. Without a bias, the last layer's gradient rows are
(∂L/∂z_i) h: the true label's row points against every other non-zero row, while two wrong labels' rows agree.
"""
from __future__ import annotations

import torch


def recover_fc_input(weight_grad: torch.Tensor, bias_grad: torch.Tensor, min_bias: float = 0.0) -> torch.Tensor:
    """[rows, in_features]: x recovered from every row i with |(∂L/∂b)_i| > min_bias (one input: each row is x;
    a batch: each row a weighted mix of the inputs). Rows with no bias gradient are left out."""
    if weight_grad.ndim != 2 or bias_grad.ndim != 1 or bias_grad.shape[0] != weight_grad.shape[0]:
        raise ValueError(f"expected ∂L/∂W [out, in] and ∂L/∂b [out], got {tuple(weight_grad.shape)} and "
                         f"{tuple(bias_grad.shape)}")
    rows = bias_grad.abs() > min_bias
    if not rows.any():
        raise ValueError(f"no row of ∂L/∂b exceeds {min_bias:g} in magnitude: nothing to recover")
    return weight_grad[rows] / bias_grad[rows, None]


def recover_fc_input_best(weight_grad: torch.Tensor, bias_grad: torch.Tensor) -> torch.Tensor:
    """[in_features]: the recovery from the row with the largest |(∂L/∂b)_i| (the least rounding error)."""
    row = int(bias_grad.abs().argmax())
    return recover_fc_input(weight_grad[row:row + 1], bias_grad[row:row + 1])[0]


def label_from_last_layer(weight_grad: torch.Tensor, bias_grad: torch.Tensor | None = None) -> int:
    """The label of a single example trained with cross-entropy, from its last layer's gradient [iDLG]."""
    if bias_grad is not None:
        return int(bias_grad.argmin())
    if weight_grad.ndim != 2 or weight_grad.shape[0] < 3:
        raise ValueError(f"the label from weights alone needs ∂L/∂W [classes >= 3, features], got "
                         f"{tuple(weight_grad.shape)}")
    rows = weight_grad.double()
    agreement = torch.sign(rows @ rows.T)
    agreement.fill_diagonal_(0)
    return int(agreement.sum(dim=1).argmin())
