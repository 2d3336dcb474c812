"""Inertial parameters: links merged into bodies, and world-frame spatial inertias.

A spatial inertia about the reference origin O (world axes, linear-first) is kept as
its ten parameters rather than a 6x6 matrix::

    I = [[m 1, -[h]x], [[h]x, J]]     m: mass, h = m c (first moment), J: rotational
                                      inertia about the origin

It is linear in them, so subtree sums (composite inertias) are sums of the
parameters, and no division by a mass ever happens (massless bodies are fine).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ..inference import tensor_cache
from ..model.model import Model
from ..spatial import matvec
from .batchlast import (
    DENSE_BELOW, const_matmul, cross, cross_add_, dense_products, dense_times, halves, has_tangent, mask_sum, matmul,
    mv, one_configuration, pair, pieces, plain, with_rules, writes_into_buffers,
)
from . import tree_sums
from .kinematics import Kinematics, dof_subspaces
from .topology import _uncached, model_cached, topology


@dataclass
class SpatialInertia:
    """Batch-last spatial inertias: ``m`` (k, 1), ``h`` (k, 3, B), ``J`` (k, 3, 3, B)."""

    m: torch.Tensor
    h: torch.Tensor
    J: torch.Tensor
    _dense: torch.Tensor | None = field(default=None, repr=False, compare=False)  # see matrices

    def apply(self, x: torch.Tensor, add_to: torch.Tensor | None = None) -> torch.Tensor:
        """I x for twists x (k, 6, B) -> momenta / forces (k, 6, B). ``add_to``: a
        (k, 6, B) buffer of the caller's own, to which I x is added in place (and which is
        returned) where :meth:`_apply_into` runs; otherwise ``I x + add_to``."""
        if self._into(x, add_to):
            return self._apply_into(x, add_to)
        if dense_products(x, self.h) and x.shape == (self.h.shape[0], 6, self.h.shape[-1]):
            # a short batch: one product with the 6x6 matrices, made once per inertia
            # and kept for its next product
            return dense_times(self.matrices(), x, add_to)
        y = self._apply(x)
        return y if add_to is None else y + add_to

    def apply_out(self, x: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        """I x for long batches of twists x (k, 6, B) written into ``out``, a (k, 6, B)
        view of the caller's buffer (eager, outside autograd, see :meth:`_into`)."""
        return self._apply_into(x, out, fresh=True)

    def matrices(self) -> torch.Tensor:
        """:meth:`matrix`, made on first use and kept on this object (the dense products
        of short batches)."""
        if self._dense is None:
            self._dense = self.matrix()
        return self._dense

    def _into(self, x: torch.Tensor, add_to) -> bool:
        """Whether :meth:`_apply_into` may run: a long batch of plain (k, 6, B) twists
        outside autograd (:func:`~.batchlast.writes_into_buffers`), one dtype, nothing to
        broadcast but the mass."""
        m, h, J = self.m, self.h, self.J
        k, B = h.shape[0], h.shape[-1]
        return (B >= DENSE_BELOW and x.shape == (k, 6, B) and J.shape == (k, 3, 3, B) and m.shape == (k, 1)
                and (add_to is None or add_to.shape == x.shape)
                and x.dtype == h.dtype == J.dtype == m.dtype and writes_into_buffers(x, h, J))

    def _apply_into(self, x: torch.Tensor, out: torch.Tensor | None, fresh: bool | None = None) -> torch.Tensor:
        """:meth:`apply` written component by component into one buffer (``out`` if
        given, accumulated unless ``fresh``): ``[m x_l + x_a x h; J x_a + h x x_l]``, no
        products made first and then concatenated (about a fifth fewer bytes moved)."""
        xl, xa = halves(x)
        fresh = out is None if fresh is None else fresh
        out = x.new_empty(x.shape) if out is None else out
        ol, oa = halves(out)
        m = self.m[:, :, None]  # (k, 1, 1)
        Jc, xc = self.J.unbind(2), xa.split_with_sizes([1, 1, 1], 1)  # J's columns (k, 3, B), x_a's rows (k, 1, B)
        if fresh:
            torch.mul(m, xl, out=ol)
            torch.mul(Jc[0], xc[0], out=oa)
        else:
            ol.addcmul_(m, xl)
            oa.addcmul_(Jc[0], xc[0])
        oa.addcmul_(Jc[1], xc[1]).addcmul_(Jc[2], xc[2])
        cross_add_(ol, xa, self.h)
        cross_add_(oa, self.h, xl)
        return out

    def _apply(self, x: torch.Tensor) -> torch.Tensor:
        xl, xa = halves(x)
        h_xl, h_xa = cross(self.h[:, None], pair(x)).unbind(1)  # both halves in one product
        return torch.cat([self.m[:, None] * xl - h_xa, h_xl + mv(self.J, xa)], 1)

    def subtree_sums(self, model: Model) -> "SpatialInertia":
        """Composite inertias (1+n rows): the whole robot's, then that of the subtree
        moved by each coordinate (masked sums, see ``Topology.subtrees``; compiled long
        batches: the bodies' sums level by level, see :func:`~.tree_sums.by_levels`)."""
        topo = topology(model)
        if tree_sums.by_levels(topo, self.h, self.J, self.m):
            rows = torch.nn.functional.pad(topo.body_of_dof, (1, 0))  # [0 (the whole tree), body_of_dof]
            # masses without a batch: one product with the mask. Their level sums made a
            # dozen loops of a few numbers in inductor's kernel, each run by one thread
            # while the other waits (iCub's compiled mass matrix at B = 1024: 15 such
            # loops, 0.93-0.96x the time without them)
            m, h, J = (tree_sums.subtree_sums_by_levels(topo, x).index_select(0, rows) if x.shape[-1] > 1
                       else topo.subtrees @ x for x in (self.m, self.h, self.J))
            return SpatialInertia(m, h, J)
        mask = topo.subtrees
        return SpatialInertia(mask @ self.m, mask_sum(mask, self.h), mask_sum(mask, self.J))

    def matrix(self) -> torch.Tensor:
        """(k, 6, 6, B) dense matrices: one gather of their entries from the values
        ``(0, m, h, -h, J)`` (one operator where assembling the blocks takes a dozen)."""
        k, B = self.h.shape[0], self.h.shape[-1]
        m = self.m[:, :, None].expand(k, 1, B)
        values = torch.cat([torch.zeros_like(m), m, self.h, -self.h, self.J.reshape(k, 9, B)], 1)  # (k, 17, B)
        entries = _uncached(_matrix_entries)(str(values.device))
        return values.index_select(1, entries).view(k, 6, 6, B)


@tensor_cache(8)
def _matrix_entries(device: str) -> torch.Tensor:
    """(36,) where each entry of ``[[m 1, -[h]x], [[h]x, J]]`` sits in the values
    ``(0, m, h, -h, J)`` of :meth:`SpatialInertia.matrix` (row-major)."""
    zero, m, (hx, hy, hz), (nx, ny, nz) = 0, 1, (2, 3, 4), (5, 6, 7)
    J = [[8, 9, 10], [11, 12, 13], [14, 15, 16]]
    rows = [
        [m, zero, zero, zero, hz, ny],  # -[h]x = [[0, hz, -hy], [-hz, 0, hx], [hy, -hx, 0]]
        [zero, m, zero, nz, zero, hx],
        [zero, zero, m, hy, nx, zero],
        [zero, nz, hy] + J[0],  # [h]x = [[0, -hz, hy], [hz, 0, -hx], [-hy, hx, 0]]
        [hz, zero, nx] + J[1],
        [ny, hx, zero] + J[2],
    ]
    return torch.tensor(rows, device=device).flatten()


def _skew_bl(v):
    """(k, 3, B) -> (k, 3, 3, B)."""
    x, y, z = v[:, 0], v[:, 1], v[:, 2]
    o = torch.zeros_like(x)
    return torch.stack([o, -z, y, z, o, -x, -y, x, o], 1).reshape(v.shape[0], 3, 3, v.shape[-1])


def body_parameters(model: Model):
    """(m (nb,), h (nb, 3), Io (nb, 3, 3)) of each body in its own frame (Io about the body origin).

    Cached on the model unless a link parameter requires grad."""
    def make():
        topo = topology(model)
        m_l = model.link_mass
        c = model.link_pos + matvec(model.link_rot, model.link_com)  # link CoM in the body frame
        I_c = model.link_rot @ model.link_inertia @ model.link_rot.transpose(-1, -2)
        eye = torch.eye(3, dtype=c.dtype, device=c.device)
        I_o = I_c + m_l[:, None, None] * ((c * c).sum(-1)[:, None, None] * eye - c[:, :, None] * c[:, None, :])
        nb, lb = model.nbody, topo.link_body
        m = torch.zeros(nb, dtype=m_l.dtype, device=m_l.device).index_add(0, lb, m_l)
        h = torch.zeros(nb, 3, dtype=m_l.dtype, device=m_l.device).index_add(0, lb, m_l[:, None] * c)
        Io = torch.zeros(nb, 3, 3, dtype=m_l.dtype, device=m_l.device).index_add(0, lb, I_o)
        return m, h, Io
    return model_cached(model, "_body_parameters", make, depends_on=_link_parameters(model))


def subtree_masses(model: Model) -> torch.Tensor:
    """(nb,) the mass of each body's subtree (row 0: the whole robot's), in body order.
    Cached like :func:`body_parameters`."""
    return model_cached(model, "_subtree_masses", lambda: topology(model).ancestor.t() @ body_parameters(model)[0],
                        depends_on=_link_parameters(model))


def _link_parameters(model: Model) -> tuple:
    """The model parameters the bodies' inertial parameters are made of."""
    return model.link_mass, model.link_com, model.link_inertia, model.link_rot, model.link_pos


def pseudo_inertias(model: Model) -> torch.Tensor:
    """(nb, 4, 4) each body's pseudo-inertia ``[[Sigma, h], [h^T, m]]`` in its own frame,
    about its origin: ``Sigma`` the second moment of mass ``int y y^T dm``
    (``= tr(Io)/2 1 - Io``), ``h`` the first moment, ``m`` the mass. Under a pose
    ``X = [R | p]`` it transforms as ``X Phi X^T`` (the world second moment). Cached
    like :func:`body_parameters`."""
    def make():
        m, h, Io = body_parameters(model)
        eye = torch.eye(3, dtype=Io.dtype, device=Io.device)
        sigma = 0.5 * Io.diagonal(0, -2, -1).sum(-1)[:, None, None] * eye - Io
        return torch.cat([torch.cat([sigma, h[:, :, None]], 2), torch.cat([h, m[:, None]], 1)[:, None]], 1)
    return model_cached(model, "_pseudo_inertias", make, depends_on=_link_parameters(model))


def world_inertias(model: Model, kin: Kinematics) -> SpatialInertia:
    """Spatial inertias of the bodies about the reference origin O, world axes, from
    their world poses in ``kin`` (whole-tree kinematics): the pose rows ``kin.X``
    (nb, 3, 4, B), or ``[kin.R | kin.p]`` concatenated when it has none.

    With the poses as 3x4 rows ``X = [R | p]`` and the bodies' pseudo-inertias ``Phi``
    (:func:`pseudo_inertias`), ``P = X Phi`` holds the world first moment in its last
    column and the world second moment is ``Sigma = P X^T``; then ``J = tr(Sigma) 1 -
    Sigma``. ``X Phi`` has a constant right factor: one batched matrix product
    ``Phi^T (4, 4) @ X[k, i] (4, B)`` over the (body, row) pairs instead of four
    multiply-adds over the batch. ``-Phi`` is used, so that ``-Sigma`` comes out of the
    product and only J's diagonal needs another pass. With gradients (eager, constant
    parameters): :class:`_WorldInertias`, whose backward is one product.
    """
    m = body_parameters(model)[0]
    X = torch.cat([kin.R, kin.p[:, :, None]], 2) if kin.X is None else kin.X  # (nb, 3, 4, B)
    phi = pseudo_inertias(model)
    if with_rules(X) and not phi.requires_grad and plain(X) and not has_tangent(X):
        h, J = _WorldInertias.apply(X, phi)
    else:
        h, J = _world_moments(X, phi)
    return SpatialInertia(m[:, None], h, J)


def _world_moments(X: torch.Tensor, phi: torch.Tensor):
    """(nb, 3, B) first moments ``h`` and (nb, 3, 3, B) rotational inertias ``J`` about
    O of the poses ``X`` (nb, 3, 4, B) (see :func:`world_inertias`)."""
    if one_configuration(X):  # a batch of one, eager: Sigma = (X Phi) X^T by two bmm's
        X1 = X[..., 0]
        P = torch.bmm(X1, phi)
        sigma = torch.bmm(P, X1.transpose(1, 2))
        J = sigma.neg()
        J.diagonal(0, 1, 2).add_(sigma.diagonal(0, 1, 2).sum(-1, keepdim=True))  # tr(Sigma) 1 - Sigma
        return P[:, :, 3:], J[..., None]
    A = const_matmul(X, phi.neg())  # -X Phi
    # -Sigma = A X^T (nb, 3, 3, B) from the columns of A and X. (A product with the view
    # X^T: compiled with gradients, inductor stored that operand's gradient batch-strided,
    # and the kernels reading it ran one number at a time.)
    a, x = pieces(A, 2), pieces(X, 2)
    J = a[0] * x[0].transpose(1, 2)
    for ak, xk in zip(a[1:], x[1:]):
        J = J.addcmul_(ak, xk.transpose(1, 2))
    J.diagonal(0, 1, 2).sub_(J.diagonal(0, 1, 2).sum(-1, keepdim=True))  # + tr(Sigma) 1
    return -A[:, :, 3], J


class _WorldInertias(torch.autograd.Function):
    """:func:`_world_moments` with a backward of one product: with ``P = X Phi``,
    ``h = P e_4`` and ``J = tr(Sigma) 1 - Sigma``, ``Sigma = P X^T`` (Phi symmetric),

        Xbar = W P + hbar Phi_4^T,   W = 2 tr(Jbar) 1 - (Jbar + Jbar^T)

    (``Phi_4`` Phi's last column), where autograd would run the backward of both
    products and of the diagonal's update. Differentiable again through the public
    products (second derivatives)."""

    @staticmethod
    def forward(ctx, X, phi):
        h, J = _world_moments(X, phi)
        ctx.save_for_backward(X, phi)
        return h, J

    @staticmethod
    def backward(ctx, hbar, Jbar):
        X, phi = ctx.saved_tensors
        P = const_matmul(X, phi)  # (nb, 3, 4, B)
        Xbar = None
        if Jbar is not None:
            W = -(Jbar + Jbar.transpose(1, 2))
            W.diagonal(0, 1, 2).sub_(W.diagonal(0, 1, 2).sum(-1, keepdim=True))  # 2 tr(Jbar) 1 - (Jbar + Jbar^T)
            Xbar = matmul(W, P)
        if hbar is not None:
            outer = hbar[:, :, None] * phi[:, None, :, 3, None]  # hbar Phi_4^T (nb, 3, 4, B)
            Xbar = outer if Xbar is None else Xbar + outer
        return Xbar, None


def center_of_mass(model: Model, kin: Kinematics):
    """(3, B) the CoM (about O, world axes) of whole-tree kinematics ``kin``, and the
    total mass (0-dim tensor)."""
    M = body_parameters(model)[0].sum()
    return world_first_moments(model, kin).sum(0) / M, M


def subtree_moments(model: Model, kin: Kinematics):
    """``(M, H)``: (1+n,) masses and (1+n, 3, B) world first moments about O of the whole
    robot (row 0) and of the subtree moved by each coordinate (``Topology.subtrees``),
    from whole-tree kinematics: what gravity and linear momentum need of the inertias."""
    topo = topology(model)
    return topo.subtrees @ body_parameters(model)[0], mask_sum(topo.subtrees, world_first_moments(model, kin))


def linear_momentum_rows(model: Model, kin: Kinematics) -> torch.Tensor:
    """(3, 6+n, B) the map from the MIXED generalized velocity to the linear momentum
    (world axes; the first three rows of :func:`~.crba.mass_matrix_top`'s momentum map):
    a twist ``[v; w]`` about O moves a subtree's momentum by ``M v + w x H``, so the base
    block is ``[M 1, -[H]x]`` and coordinate k's column ``M_k v_k + w_k x H_k`` for its
    motion subspace ``[v_k; w_k]``. Subtree masses and first moments only (no
    rotational inertias)."""
    M, H = subtree_moments(model, kin)
    v, w = halves(dof_subspaces(model, kin))  # (n, 3, B) each
    joints = M[1:, None, None] * v + cross(w, H[1:])
    eye = torch.eye(3, dtype=H.dtype, device=H.device)[..., None]
    base = torch.cat([(M[0] * eye).expand(3, 3, H.shape[-1]), -_skew_bl(H[:1])[0]], 1)  # (3, 6, B)
    return torch.cat([base, joints.transpose(0, 1)], 1)


def world_first_moments(model: Model, kin: Kinematics) -> torch.Tensor:
    """(nb, 3, B) each body's first moment ``m_i c_i`` about O, world axes, from the
    whole-tree kinematics ``kin``: ``X [h; m]`` with the pose rows ``X = [R | p]`` and
    the last column of the pseudo-inertias, one product with a constant factor (iCub, B
    = 1024: 0.52x the time of ``R h + m p`` made by broadcasting and a sum)."""
    X = torch.cat([kin.R, kin.p[:, :, None]], 2) if kin.X is None else kin.X  # (nb, 3, 4, B)
    return const_matmul(X, pseudo_inertias(model)[:, :, 3:])[:, :, 0]
