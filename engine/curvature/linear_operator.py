"""The one linear-operator type of the curvature code: A on R^dim, seen only through its products.

An operator is R ≥ 1 members A_0 … A_{R−1}, each linear R^dim → R^dim (symmetric for every
curvature built here), given by one function of a block of rows

    products(V [B, dim], members [B] | None) -> [B, dim],   row b = A_{members[b]} V[b]

(members None: member 0 for every row). batch_shape is () for one member, (R,) for a batch:
the model Hessian's members are its (point, output) pairs. The protocol:

    A @ x                 x [*batch, dim]    -> [*batch, dim]     each member times its own vector
    A @ X                 X [*batch, dim, k] -> [*batch, dim, k]  each member times each of its k columns
    A.apply(V, members)   the rows form above, the one Lanczos and SLQ use (no transposes)
    A[r]                  member r as an operator of its own (batch_shape ()), counting into A
    A.products            operator-vector products applied so far (a column or a row counts one),
                          summed over every view of A: the unit of cost
    A.to_scipy()          a scipy.sparse.linalg.LinearOperator of shape (R·dim, R·dim): the
                          block diagonal diag(A_0, …, A_{R−1}) on the members' stacked vectors,
                          A itself for one member (rmatvec = matvec: the members are symmetric)

shape = batch_shape + (dim, dim); vectors are cast to `dtype` and products run on `device`
without autograd.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from scipy.sparse.linalg import LinearOperator as ScipyLinearOperator
from torch import Tensor

Products = Callable[[Tensor, Tensor | None], Tensor]
"""(V [B, dim], members [B] int64 or None) -> (A_{members[b]} V[b])_b [B, dim]."""


@dataclass
class _Count:
    products: int = 0


class LinearOperator:
    """R members A_r: R^dim → R^dim by their row products (module docstring)."""

    def __init__(
        self,
        products: Products,
        dim: int,
        *,
        dtype: torch.dtype,
        device: torch.device | str,
        members: int | None = None,
        member: Callable[[int], LinearOperator] | None = None,
        count: _Count | None = None,
    ) -> None:
        """members None: one operator (batch_shape ()); member(r) builds A[r] where a member has a
        cheaper product of its own than the batch's (default: the batch's products at member r)."""
        self._products, self._member = products, member
        self.dim, self.dtype, self.device = dim, dtype, torch.device(device)
        self.batch_shape: tuple[int, ...] = () if members is None else (members,)
        self._count = count or _Count()

    @property
    def members(self) -> int:
        return self.batch_shape[0] if self.batch_shape else 1

    @property
    def shape(self) -> tuple[int, ...]:
        return (*self.batch_shape, self.dim, self.dim)

    @property
    def products(self) -> int:
        return self._count.products

    @classmethod
    def from_matrix(cls, A: Tensor) -> LinearOperator:
        """A [dim, dim] or a batch [R, dim, dim] of matrices as an operator: row b ↦ A_{members[b]} V[b]."""
        if A.dim() == 2:
            return cls(lambda V, members: V @ A.T, A.shape[-1], dtype=A.dtype, device=A.device)
        return cls(
            lambda V, members: (A[members] @ V.unsqueeze(-1)).squeeze(-1),
            A.shape[-1],
            dtype=A.dtype,
            device=A.device,
            members=A.shape[0],
        )

    def apply(self, V: Tensor, members: Tensor | list[int] | None = None) -> Tensor:
        """(A_{members[b]} V[b])_b [B, dim] for V [B, dim] (members None: every row by member 0)."""
        if members is not None and not isinstance(members, Tensor):
            members = torch.tensor(members, dtype=torch.int64)
        self._count.products += V.shape[0]
        with torch.no_grad():
            return self._products(V.to(self.dtype), members)

    def __matmul__(self, X: Tensor) -> Tensor:
        batch = len(self.batch_shape)
        if X.shape[:batch] != self.batch_shape or X.dim() - batch not in (1, 2) or X.shape[batch] != self.dim:
            raise ValueError(
                f"an operator of shape {self.shape} multiplies [*batch, dim] or [*batch, dim, k], not {list(X.shape)}"
            )
        block = X if X.dim() == batch + 2 else X.unsqueeze(-1)
        k = block.shape[-1]
        rows = block.movedim(-1, -2).reshape(-1, self.dim)
        members = torch.arange(self.members).repeat_interleave(k) if batch else None
        out = self.apply(rows, members).reshape(*self.batch_shape, k, self.dim).movedim(-2, -1)
        return out if X.dim() == batch + 2 else out.squeeze(-1)

    def __getitem__(self, r: int) -> LinearOperator:
        """Member r alone; its products count in this operator's `products`."""
        if not self.batch_shape:
            raise IndexError("an operator without a batch has no members to index")
        if not 0 <= r < self.members:
            raise IndexError(f"member {r} of {self.members}")
        if self._member is not None:
            member = self._member(r)
            member._count = self._count
            return member
        index = torch.tensor([r])
        return LinearOperator(
            lambda V, members: self._products(V, index.expand(V.shape[0])),
            self.dim,
            dtype=self.dtype,
            device=self.device,
            count=self._count,
        )

    def observed(self, after: Callable[[int], None]) -> LinearOperator:
        """This operator, calling after(rows) once each block of products is done (progress, checkpoints)."""

        def products(V: Tensor, members: Tensor | None) -> Tensor:
            out = self._products(V, members)
            after(V.shape[0])
            return out

        members = self.batch_shape[0] if self.batch_shape else None
        return LinearOperator(
            products, self.dim, dtype=self.dtype, device=self.device, members=members, count=self._count
        )

    def to_scipy(self) -> ScipyLinearOperator:
        """The block diagonal of the members on R^{R·dim} (A itself for one member), numpy in `dtype`."""
        size = self.members * self.dim

        def matmat(X: np.ndarray) -> np.ndarray:
            block = torch.as_tensor(np.asarray(X), device=self.device).reshape(*self.batch_shape, self.dim, -1)
            return (self @ block).reshape(size, -1).cpu().numpy()

        def matvec(x: np.ndarray) -> np.ndarray:
            return matmat(np.asarray(x).reshape(size, 1)).reshape(-1)

        dtype = torch.empty(0, dtype=self.dtype).numpy().dtype
        return ScipyLinearOperator(
            (size, size), matvec=matvec, rmatvec=matvec, matmat=matmat, rmatmat=matmat, dtype=dtype
        )
