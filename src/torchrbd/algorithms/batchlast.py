"""3D algebra on batch-last tensors.

Inside the algorithms the batch is the LAST, contiguous dimension: a vector is
(..., 3, B), a 3x3 matrix (..., 3, 3, B). Products of tiny matrices become a few
broadcast multiply-adds over long contiguous rows, which vectorise well on CPU
and GPU, instead of thousands of tiny batched matmuls.

Operands are cut into rows and columns with ``split``/``unbind`` rather than
indexing: the backward of a split is one ``cat`` (of an unbind, one ``stack``),
while each indexed slice would cost a zero-filled copy of the whole operand.
"""

from __future__ import annotations

import math

import torch
import torch.autograd.forward_ad as forward_ad


def matmul(A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
    """(..., r, c, B) @ (..., c, s, B) -> (..., r, s, B) (broadcasting).

    Long batches: ``c`` fused multiply-adds over contiguous rows; with gradients (eager),
    through :class:`_Matmul`, whose backward is two such products. A batch of one (both
    operands ending in 1, eager): one library matmul, fewer kernel launches.
    """
    if one_configuration(A, B):
        return _one_matmul(A.squeeze(-1), B.squeeze(-1)).unsqueeze(-1)
    if with_rules(A, B):
        return _Matmul.apply(A, B)
    return _matmul_values(A, B)


def one_configuration(*tensors) -> bool:
    """Whether products of a batch of one are library calls on the squeezed matrices
    (:func:`_one_matmul`): eager, where they take fewer operators than multiply-adds.
    Compiled code keeps the multiply-adds, which inductor fuses into its loops, where
    each library product stays a call of its own (iCub, compiled, B = 1, in-process A/B:
    forward kinematics 0.89x, mass matrix 0.95x, aba 0.95x the time)."""
    return all(t.shape[-1] == 1 for t in tensors) and not torch.compiler.is_compiling()


def _one_matmul(A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
    """``A @ B`` for a batch of one (the batch dimension squeezed): one ``bmm`` for two
    stacks of matrices of the same length (``torch.matmul`` wraps it in six to eight view,
    reshape and copy operators: 48 of iCub's aba's 276 operators at B = 1), else
    ``matmul``."""
    if A.dim() == 3 and B.dim() == 3 and A.shape[0] == B.shape[0]:
        return torch.bmm(A, B)
    return torch.matmul(A, B)


def _matmul_values(A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
    cols, rows = pieces(A, -2), pieces(B, -3)
    C = cols[0] * rows[0]  # fresh, of the full broadcast shape: accumulate in place
    for a, b in zip(cols[1:], rows[1:]):
        C.addcmul_(a, b)
    return C


def plain(t: torch.Tensor) -> bool:
    """False for a tensor wrapped by a ``torch.func`` transform (vmap, grad, jacrev...)."""
    wrapped = getattr(torch._C._functorch, "is_functorch_wrapped_tensor", None)
    return wrapped is None or not wrapped(t)


def has_tangent(*tensors) -> bool:
    """Whether a tensor carries a forward-mode tangent (``torch.autograd.forward_ad``),
    which in-place writes into fresh buffers (``out=``) do not support."""
    return any(forward_ad.unpack_dual(t).tangent is not None for t in tensors)


def writes_into_buffers(*tensors) -> bool:
    """Whether results may be written into fresh buffers with ``out=`` (instead of
    concatenating computed pieces): eager, no gradient wanted, outside ``torch.func``
    transforms and forward-mode AD (none of them has a rule for ``out=``). None among
    ``tensors`` (an operand that is not there) is skipped."""
    tensors = [t for t in tensors if t is not None]
    return (not torch.compiler.is_compiling() and not with_rules(*tensors)
            and all(plain(t) for t in tensors) and not has_tangent(*tensors))


def hand_written_backward(H: torch.Tensor, q: torch.Tensor, batch_from: int, parameters) -> bool:
    """Whether an output of ``H`` (B, 4, 4) and ``q`` (B, n) takes its autograd Function
    with a hand-written backward (``frame_transform_grad``, ``center_of_mass_grad``,
    ``jacobian_grad``): eager, a batch of at least ``batch_from``, a gradient wanted from
    ``q``, plain tensors (not in a ``torch.func`` transform) without forward-mode
    tangents, and the model parameters ``parameters()`` (a callable, asked only when
    the rest holds: calls without gradients decide cheaply) that need no gradient (the
    Function does not differentiate them)."""
    if (not torch.is_grad_enabled() or not q.requires_grad or torch.compiler.is_compiling()
            or H.shape[0] < batch_from):
        return False
    return plain(H) and plain(q) and not has_tangent(H, q) and not any(t.requires_grad for t in parameters())


def differentiated_again(make, inputs: tuple, needs: tuple, cotangent: torch.Tensor) -> list:
    """The backward of those Functions under ``create_graph``: ``make()`` recomputed
    operator by operator inside the graph and differentiated w.r.t. the ``inputs``
    whose entry of ``needs`` is set (None for the others), so that second derivatives
    are exact."""
    wanted = [x for x, need in zip(inputs, needs) if need]
    with torch.enable_grad():
        out = make()
    grads = iter(torch.autograd.grad(out, wanted, cotangent, create_graph=True, allow_unused=True))
    return [next(grads) if need else None for need in needs]


DENSE_BELOW = 96
"""Batches shorter than this (eager) multiply spatial inertias and cross products as
dense 6x6 matrices (:func:`dense_products`); longer ones component by component, into
fresh buffers where nothing is differentiated (:func:`writes_into_buffers`). iCub,
in-process A/Bs: the component-wise products taken down to B = 2 cost 1.1-1.3x the
time at B = 4-16; the dense ones (and the pointer-jumping poses) taken up to 127,
against the component-wise ones: B = 64 M 0.94x, h 0.78x, aba 0.81x, aba
forward+backward 0.90x; B = 80 0.94x / 0.77x / 0.96x / 0.92x; B = 100 0.99-1.08x;
B = 128 1.05-1.25x."""


def dense_products(*tensors) -> bool:
    """Whether spatial products take their dense 6x6 form (:func:`dense_times`): eager,
    and a batch of fewer than :data:`DENSE_BELOW`, where each operator's fixed cost
    outweighs its arithmetic (the component-wise products take several operators each).
    iCub, in-process A/Bs: at B = 1 mass matrix 0.83x, aba 0.87x the time."""
    return all(t.shape[-1] < DENSE_BELOW for t in tensors) and not torch.compiler.is_compiling()


def dense_times(A: torch.Tensor, x: torch.Tensor, add: torch.Tensor | None = None) -> torch.Tensor:
    """(k, r, c, B) @ (k, c, B) (+ ``add`` (k, r, B)) -> (k, r, B) for dense matrices of
    a short batch: one ``bmm`` (``baddbmm``) for a batch of one, else one multiply-sum."""
    if A.shape[-1] == 1 and x.shape[-1] == 1:
        return torch.bmm(A[..., 0], x) if add is None else torch.baddbmm(add, A[..., 0], x)
    y = (A * x[:, None]).sum(2)
    return y if add is None else y.add_(add)


def dense_t_times(A: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """``A^T x``, (k, r, c, B) and (k, r, B) -> (k, c, B), as :func:`dense_times`."""
    if A.shape[-1] == 1 and x.shape[-1] == 1:
        return torch.bmm(A[..., 0].transpose(1, 2), x)
    return (A * x[:, :, None]).sum(1)


def with_rules(*operands) -> bool:
    """Whether a product goes through its Function with hand-written rules: eager mode
    (dynamo cannot trace a Function with a ``jvp``; inductor differentiates the
    multiply-adds itself) and an operand that needs a gradient."""
    return (torch.is_grad_enabled() and any(x.requires_grad for x in operands)
            and not torch.compiler.is_compiling())


def bilinear_function(name: str, values, grad_left, grad_right, tangent_right=None, doc: str = "") -> type:
    """An autograd Function for a batch-last product ``values(a, b)``, linear in each
    operand (``a`` up to a constant term): backward ``grad_left(G, a, b)`` and
    ``grad_right(G, a, b)``, each summed to its operand's shape (broadcasting), and the
    forward-mode rule ``values(da, b) + tangent_right(a, db)`` (``tangent_right``
    defaults to ``values``). The rules call the public, differentiable products, so
    second derivatives work; ``generate_vmap_rule`` serves ``torch.func``. Autograd
    through the multiply-adds of ``values`` would reduce over the broadcast dimension of
    every product and concatenate the gradients of the split pieces: about twice the
    operators. Never used while ``torch.compile`` traces (see :func:`with_rules`)."""
    tangent_right = tangent_right or values

    def forward(a, b):
        return values(a, b)

    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(*inputs)
        ctx.save_for_forward(*inputs)

    def backward(ctx, G):
        a, b = ctx.saved_tensors
        return (grad_left(G, a, b).sum_to_size(a.shape) if ctx.needs_input_grad[0] else None,
                grad_right(G, a, b).sum_to_size(b.shape) if ctx.needs_input_grad[1] else None)

    def jvp(ctx, da, db):
        a, b = ctx.saved_tensors
        out = 0
        if da is not None:
            out = values(da, b)
        if db is not None:
            out = out + tangent_right(a, db)
        return out

    body = {"generate_vmap_rule": True, "__doc__": doc, "__module__": __name__}
    body.update((f.__name__, staticmethod(f)) for f in (forward, setup_context, backward, jvp))
    return type(name, (torch.autograd.Function,), body)


_Matmul = bilinear_function(
    "_Matmul", _matmul_values,
    lambda G, A, B: matmul(G, transpose(B)), lambda G, A, B: matmul(transpose(A), G),
    doc="""Batch-last :func:`matmul`: ``grad A = G B^T``, ``grad B = A^T G`` (iCub,
    B = 1024, forward+backward, 2 / 1 threads: mass matrix 0.94 / 0.88x the time, bias
    force 0.96 / 0.79x, CMM 0.85 / 0.74x).""",
)


def const_matmul(A: torch.Tensor, C: torch.Tensor) -> torch.Tensor:
    """(k, r, c, B) @ (k, c, s) -> (k, r, s, B) for a right factor ``C`` without a batch
    (a model constant). Eager: one batched matrix product ``C[k]^T (s, c) @ A[k, i]
    (c, B)`` over the (k, i) pairs, several times faster on CPU than ``c``
    multiply-adds over the batch; a batch of one: ``A[k] @ C[k]``, one ``bmm``. Compiled:
    those multiply-adds (:func:`matmul`), which inductor fuses with their neighbours where
    a matrix product would be a library call."""
    if torch.compiler.is_compiling():
        return matmul(A, C[..., None])
    if A.shape[-1] == 1:
        return _one_matmul(A.squeeze(-1), C).unsqueeze(-1)
    return torch.matmul(C.transpose(1, 2)[:, None], A)


def const_lmatmul(C: torch.Tensor, x: torch.Tensor, fuse: bool = True) -> torch.Tensor:
    """(k, r, t) @ (k, t, B) -> (k, r, B) for a left factor ``C`` without a batch: one
    batched matrix product in eager, a fused multiply-sum when compiled (see
    :func:`const_matmul`) unless ``fuse`` is False. A frame's products pass False: its
    compiled methods store every intermediate (``KinDynComputations._SHORT_CHAINS``),
    which would store the multiply-sum's whole product first (iCub, B = 1024, compiled
    A/B: forward kinematics 0.76x, Jacobian 0.94x the time with the library product;
    the Jacobian's local transforms have since taken one multiply-add per term, see
    :func:`~.kinematics._local_transforms`)."""
    if torch.compiler.is_compiling() and fuse:
        return (C[..., None] * x[:, None]).sum(2)
    return torch.bmm(C, x)


def mm(A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
    """(..., 3, 3, B) @ (..., 3, 3, B) -> (..., 3, 3, B)."""
    return matmul(A, B)


def mv(A: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """(..., 3, 3, B) @ (..., 3, B) -> (..., 3, B)."""
    if one_configuration(A, v):
        return _one_matmul(A.squeeze(-1), v)
    if with_rules(A, v):
        return _Matmul.apply(A, v.unsqueeze(-2)).squeeze(-2)
    a, x = A.unbind(-2), pieces(v, -2)
    return (a[0] * x[0]).addcmul_(a[1], x[1]).addcmul_(a[2], x[2])


def mtv(A: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """A^T v for (..., 3, 3, B), (..., 3, B) -> (..., 3, B)."""
    if one_configuration(A, v):
        return _one_matmul(A.squeeze(-1).transpose(-1, -2), v)
    if with_rules(A, v):
        return _Matmul.apply(transpose(A), v.unsqueeze(-2)).squeeze(-2)
    a, x = A.unbind(-3), pieces(v, -2)
    return (a[0] * x[0]).addcmul_(a[1], x[1]).addcmul_(a[2], x[2])


def cross(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Cross product of (..., 3, B) vectors (broadcasting). For long batches it is
    written out by components (faster than ``torch.linalg.cross`` along a non-last
    dimension), with gradients (eager) through :class:`_Cross`; for short ones the
    single library call costs less."""
    if max(a.shape[-1], b.shape[-1]) < DENSE_BELOW:
        if a.dim() != b.dim():  # linalg.cross broadcasts, but only between equal ranks
            a, b = (a[(None,) * (b.dim() - a.dim())], b) if a.dim() < b.dim() else (a, b[(None,) * (a.dim() - b.dim())])
        return torch.linalg.cross(a, b, dim=-2)
    if with_rules(a, b):
        return _Cross.apply(a, b)
    return _cross_values(a, b)


def _broadcast_shape(s: torch.Size, t: torch.Size) -> tuple:
    """The broadcast of two valid shapes (``torch.broadcast_shapes`` costs tens of us)."""
    if len(s) < len(t):
        s, t = t, s
    t = (1,) * (len(s) - len(t)) + tuple(t)
    return tuple(a if b == 1 else b for a, b in zip(s, t))


def _cross_values(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    a0, a1, a2 = a.unbind(-2)
    b0, b1, b2 = b.unbind(-2)
    if a.dtype == b.dtype and writes_into_buffers(a, b):
        out = a.new_empty(_broadcast_shape(a.shape, b.shape))
        o0, o1, o2 = out.unbind(-2)
        torch.mul(a1, b2, out=o0).addcmul_(a2, b1, value=-1)
        torch.mul(a2, b0, out=o1).addcmul_(a0, b2, value=-1)
        torch.mul(a0, b1, out=o2).addcmul_(a1, b0, value=-1)
        return out
    return torch.stack([(a1 * b2).addcmul_(a2, b1, value=-1), (a2 * b0).addcmul_(a0, b2, value=-1),
                        (a0 * b1).addcmul_(a1, b0, value=-1)], -2)


def cross_add_(out: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``out += a x b`` in place for (..., 3, B) vectors, two multiply-adds per component
    (no product made first and added after: a fifth fewer bytes moved). For fresh
    buffers outside autograd (see :func:`writes_into_buffers`)."""
    (a0, a1, a2), (b0, b1, b2), (o0, o1, o2) = a.unbind(-2), b.unbind(-2), out.unbind(-2)
    o0.addcmul_(a1, b2).addcmul_(a2, b1, value=-1)
    o1.addcmul_(a2, b0).addcmul_(a0, b2, value=-1)
    o2.addcmul_(a0, b1).addcmul_(a1, b0, value=-1)
    return out


def cross_sum(*pairs) -> torch.Tensor:
    """``sum_k a_k x b_k`` for pairs ``(a_k, b_k)`` of (..., 3, B) vectors of one shape
    (a difference is a sum with the pair swapped). Long batches without autograd: the
    first product written into a buffer, the others added into it by multiply-adds
    (:func:`cross_add_`), where separate products would each make a result and then a
    pass per addition; otherwise (and compiled, where inductor fuses them) a sum of
    products."""
    operands = [x for pair in pairs for x in pair]
    if operands[0].shape[-1] < DENSE_BELOW or len({x.shape for x in operands}) > 1 \
            or not writes_into_buffers(*operands):
        return sum(cross(a, b) for a, b in pairs)
    out = _cross_values(*pairs[0])
    for a, b in pairs[1:]:
        cross_add_(out, a, b)
    return out


_Cross = bilinear_function(
    "_Cross", _cross_values,
    lambda G, a, b: cross(b, G), lambda G, a, b: cross(G, a),
    doc="""Batch-last :func:`cross`: ``grad a = b x G``, ``grad b = G x a``, two cross
    products instead of autograd through six products (iCub, B = 1024,
    forward+backward, in-process A/Bs on 1 and 2 threads: bias force 0.88-0.99x the
    time, aba 0.90-1.00x; mass matrix and CMM within the noise).""",
)


def mask_sum(mask: torch.Tensor, x: torch.Tensor, add: torch.Tensor | None = None,
             columns=None) -> torch.Tensor:
    """``add + sum_k mask[i, k] x[k]``: (r, k) mask, (k, *s) x, optional ``add``
    (*s, broadcast over i, or (r, *s)) -> (r, *s). One matrix product over the flattened
    trailing dimensions (sums over supports or subtrees with a 0/1 mask).

    ``columns``: the mask as padded column lists ``(cols, weights)`` (r, w) (see
    ``Topology.ancestor_columns``). Compiled, the sum is then w gathered terms, which
    inductor fuses into the kernels around it (no library product, whose operands
    and result each make a pass over memory); a few nonzeros per row only: iCub's
    supports (w = 8 of 24 bodies) took 0.90-0.93x the time for the compiled bias
    force at B = 1024, where its subtrees (w = 24 for the whole tree) took 1.3x."""
    if columns is not None and torch.compiler.is_compiling():
        cols, weights = columns
        shape = (cols.shape[0], *([1] * (x.dim() - 1)))
        out = add
        for k in range(cols.shape[1]):
            # one term per column position, so that inductor vectorises over the batch
            # (x[cols] * weights summed over dim 1 vectorised over the 8 positions: 9x the time)
            term = x.index_select(0, cols[:, k]) * weights[:, k].view(shape)
            out = term if out is None else out + term
        return out
    flat = x.reshape(x.shape[0], math.prod(x.shape[1:]))
    if add is None:
        out = torch.mm(mask, flat)
    elif torch.compiler.is_compiling() and add.numel() == flat.shape[1]:
        # the addition as one more term of the product, a column of ones in the mask:
        # inductor turns mm + a broadcast addition back into addmm, which copies the
        # addition into its output first
        ones = mask.new_ones(mask.shape[0], 1)
        out = torch.mm(torch.cat([mask, ones], 1), torch.cat([flat, add.reshape(1, -1)]))
    elif torch.compiler.is_compiling():  # the addition fuses into the next kernel; addmm first copies it into out
        out = torch.mm(mask, flat) + add.reshape(-1, flat.shape[1])
    else:
        out = torch.addmm(add.reshape(-1, flat.shape[1]), mask, flat)
    return out.reshape(mask.shape[0], *x.shape[1:])


def gathered_dots(x: torch.Tensor, i: torch.Tensor, y: torch.Tensor, j: torch.Tensor, out=None) -> torch.Tensor:
    """``(x[i_p] . y[j_p])_p``: (k, c, B), (p,), (k', c, B), (p,) -> (p, B), one component
    at a time. The gathered operands (p, B) then stay in cache, where gathering whole
    rows, (p, c, B), makes temporaries of megabytes (iCub's mass matrix at B = 1024:
    0.84x the time in float64, 0.67x in float32). ``out``: a contiguous (p, B) buffer to
    write into (no gradients)."""
    xs, ys = x.unbind(1), y.unbind(1)
    out = torch.mul(xs[0].index_select(0, i), ys[0].index_select(0, j), out=out)
    for xc, yc in zip(xs[1:], ys[1:]):
        out.addcmul_(xc.index_select(0, i), yc.index_select(0, j))
    return out


def crosswise_empty(like: torch.Tensor, rows: int, B: int) -> torch.Tensor:
    """An uninitialised (rows, B) batch-last buffer like ``like`` (dtype, device) for
    entries that are read across the rows, one from each row per configuration (a
    transposing copy or gather to batch-first). Where B columns fill a whole even number
    of 64-byte cache lines (B = 1024 in float64 or float32: any power of two from 16),
    the rows are padded by one line: otherwise rows a multiple of 4 KB apart all map
    to the same set of the L1 cache, and such reads miss it on nearly every row (iCub's
    mass matrix at B = 1024: its placing gather 0.6-0.7x the time with padded rows,
    transposing copies of 12-267 rows 0.44-0.79x). A view of the padded buffer."""
    return like.new_empty(rows, B + crosswise_pad(like, B))[:, :B]


def crosswise_pad(like: torch.Tensor, B: int) -> int:
    """The padding (numbers) of each row of :func:`crosswise_empty`'s buffers."""
    line = 64 // like.element_size()
    return line if like.device.type == "cpu" and B % (2 * line) == 0 else 0


def halves(x: torch.Tensor, dim: int = 1):
    """The linear and angular halves ``(x[:3], x[3:])`` of 6-vectors along ``dim``
    (views; see the module note on ``split``)."""
    return x.split_with_sizes([3, 3], dim)


def pair(x: torch.Tensor) -> torch.Tensor:
    """6-vectors (k, 6, B) as their two halves stacked, (k, 2, 3, B) (a view when x is
    contiguous): ``cross(a[:, None], pair(x))`` crosses ``a`` with both halves in one
    call, half the operators of two calls."""
    return x.view(x.shape[0], 2, 3, *x.shape[2:])


def pieces(x: torch.Tensor, dim: int):
    """``x`` cut into its size-1 slices along ``dim`` (kept as a dimension of size 1):
    ``split(1, dim)`` without the Python wrapper of ``Tensor.split``."""
    return x.split_with_sizes([1] * x.shape[dim], dim)


def transpose(A: torch.Tensor) -> torch.Tensor:
    """Swap the two matrix dimensions of (..., r, c, B)."""
    return A.transpose(-2, -3)


def to_batch_first(x: torch.Tensor) -> torch.Tensor:
    """(*s, B) -> (B, *s) (a view; its gradient comes back batch-last, see
    :func:`batch_last_grad`)."""
    x = batch_last_grad(x)
    return x.permute(x.dim() - 1, *range(x.dim() - 1))


class _BatchLastGrad(torch.autograd.Function):
    """Identity; the backward returns the gradient contiguous (see :func:`batch_last_grad`)."""

    generate_vmap_rule = True

    @staticmethod
    def forward(x):
        return x.view_as(x)

    @staticmethod
    def setup_context(ctx, inputs, output):
        pass

    @staticmethod
    def backward(ctx, grad):
        return grad.contiguous()

    @staticmethod
    def jvp(ctx, tangent):
        return tangent


def batch_last_grad(x: torch.Tensor) -> torch.Tensor:
    """``x`` itself, whose gradient is made contiguous: apply it to a batch-last tensor
    before a view lays it out batch-first. Otherwise the gradient comes back with
    batch-first strides, elementwise operators keep their inputs' strides, and the
    whole backward of the batch-last algorithms would run on that layout, with loops
    along the short dimensions and reductions over strided rows (aba's
    forward+backward: several times slower sums). In compiled code inductor picks the
    layouts itself."""
    if not (x.requires_grad and torch.is_grad_enabled() and x.is_contiguous()) or torch.compiler.is_compiling():
        return x  # (a view of batch-first memory keeps its gradient in that layout)
    if x.shape[-1] < 64:
        return x  # short batches: the layout hardly matters, an extra autograd node does
    return _BatchLastGrad.apply(x)
