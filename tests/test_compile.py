"""The algorithms trace into single torch.compile graphs (no graph breaks), and the
opt-in compiled facade gives the eager results."""

import warnings

import pytest
import torch
import torch._dynamo

import torchrbd
import torchrbd.models
from torchrbd.algorithms import tree_sums
from torchrbd.algorithms.batchlast import DENSE_BELOW
from conftest import MASSLESS_JOINT_URDF


def _inputs(kd, B=3):
    g = torch.Generator().manual_seed(0)
    n = kd.NDoF
    H = torch.eye(4, dtype=torch.float64).expand(B, 4, 4).clone()
    H[:, :3, 3] = torch.randn(B, 3, generator=g, dtype=torch.float64)
    r = lambda *s: torch.randn(*s, generator=g, dtype=torch.float64)  # noqa: E731
    return H, r(B, n), r(B, 6), r(B, n), r(B, n)


@pytest.mark.parametrize("grad", [False, True], ids=["values", "with-grad"])
def test_no_graph_breaks(grad, monkeypatch):
    """One graph per method, also when the inputs require grad (then aba's solves are
    custom autograd Functions, dense and tree-sparse: a Function with a ``jvp`` broke
    the graph at each call)."""
    kd = torchrbd.models.load("quadruped")
    H, q, nu, qd, tau = _inputs(kd)
    if grad:
        q, qd, tau = (x.requires_grad_() for x in (q, qd, tau))
    calls = {
        "mass_matrix": lambda: kd.mass_matrix(H, q),
        "bias_force": lambda: kd.bias_force(H, q, nu, qd),
        "aba": lambda: kd.aba(H, q, nu, qd, tau),
        "jacobian": lambda: kd.jacobian("FL_foot", H, q),
        "jacobian_dot": lambda: kd.jacobian_dot("FL_foot", H, q, nu, qd),
        "link_velocities": lambda: kd.link_velocities(H, q, nu, qd),
        "centroidal_momentum_matrix": lambda: kd.centroidal_momentum_matrix(H, q),
    }
    from torchrbd.algorithms import tree_cholesky

    for name, call in [*calls.items(), ("aba on the tree path", calls["aba"])]:
        if name == "aba on the tree path":
            monkeypatch.setattr(tree_cholesky, "COMPILED_FROM", 1)
        torch._dynamo.reset()
        explanation = torch._dynamo.explain(call)()
        assert explanation.graph_break_count == 0, (name, explanation.break_reasons)


def test_compiled_matches_eager():
    kd = torchrbd.models.load("arm7")
    H, q, nu, qd, tau = _inputs(kd, B=2)
    kc = kd.compiled(backend="eager")  # the graph capture path, without code generation time
    torch.testing.assert_close(kc.mass_matrix(H, q), kd.mass_matrix(H, q), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(kc.aba(H, q, nu, qd, tau), kd.aba(H, q, nu, qd, tau), rtol=1e-10, atol=1e-10)


def test_each_compiled_method_of_each_copy_compiles_on_its_own():
    """Dynamo keeps compiled variants per Python code object, at most
    ``recompile_limit`` (8) of them, and past that runs the function eagerly with one
    logged warning. The public methods share their decorators' wrapper: 8 variants
    (method, dtype, batch length, gradients) once served every method of every
    compiled copy, and a ninth ran eagerly. Here 2 dtypes x 7 methods on one copy, then
    a second copy, then methods compiled by ``torch.compile(kd.method)``: each call
    compiles (dynamo raises where it would fall back) and gives the eager result."""
    torch._dynamo.reset()
    with torch._dynamo.config.patch(fail_on_recompile_limit_hit=True):
        _call_many_compiled_variants()


def _call_many_compiled_variants():
    kd = torchrbd.models.load("arm7")
    frame = kd.frame_names[-1]
    calls = {
        "mass_matrix": lambda k, H, q, nu, qd, tau: k.mass_matrix(H, q),
        "bias_force": lambda k, H, q, nu, qd, tau: k.bias_force(H, q, nu, qd),
        "aba": lambda k, H, q, nu, qd, tau: k.aba(H, q, nu, qd, tau),
        "jacobian": lambda k, H, q, nu, qd, tau: k.jacobian(frame, H, q),
        "forward_kinematics": lambda k, H, q, nu, qd, tau: k.forward_kinematics(frame, H, q),
        "CoM_position": lambda k, H, q, nu, qd, tau: k.CoM_position(H, q),
        "gravity_term": lambda k, H, q, nu, qd, tau: k.gravity_term(H, q),
    }
    kc = kd.compiled(backend="eager")
    args = _inputs(kd, B=2)
    for name, call in calls.items():
        torch.testing.assert_close(call(kc, *args), call(kd, *args), rtol=1e-10, atol=1e-10, msg=name)
    for name, call in calls.items():  # float32: normwise against float64 (aba: eps32 cond(M) is 5e-3 here)
        out, ref = call(kc, *[x.float() for x in args]), call(kd, *args)
        assert out.dtype == torch.float32
        assert (out.double() - ref).abs().max() <= 1e-3 * ref.abs().max(), name
    other = kd.compiled(backend="eager")
    for name, call in calls.items():
        torch.testing.assert_close(call(other, *args), call(kd, *args), rtol=1e-10, atol=1e-10, msg=name)
    # and methods compiled one by one by the user, 2 variants each
    for dtype in (torch.float64, torch.float32):
        x = [a.to(dtype) for a in args]
        for name in ("mass_matrix", "gravity_term", "CoM_position", "CoM_jacobian", "centroidal_momentum_matrix"):
            torch.testing.assert_close(torch.compile(getattr(kd, name), backend="eager")(*x[:2]),
                                       getattr(kd, name)(*x[:2]), msg=name)


def test_compiled_mass_matrix_of_a_tree_with_armature_in_each_representation():
    """A branched tree with rotor inertia (the MJCF humanoid): under compile the mass
    matrix is assembled from its distinct entries only; it matches eager, zeros and
    mirror included, and comes back batch-first and contiguous. Switching the
    representation recompiles: aba once kept the representation it was traced with
    (dynamo lost the guard on an enum attribute also reached from a module global)."""
    kd = torchrbd.models.load("humanoid", format="mjcf")
    assert kd.model.has_armature
    H, q, nu, qd, tau = _inputs(kd, B=3)
    torch._dynamo.reset()
    kc = kd.compiled(backend="eager")
    for rep in torchrbd.Representations:
        kd.set_frame_velocity_representation(rep)
        kc.set_frame_velocity_representation(rep)
        M = kc.mass_matrix(H, q)
        assert M.is_contiguous()
        torch.testing.assert_close(M, kd.mass_matrix(H, q), rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(kc.aba(H, q, nu, qd, tau), kd.aba(H, q, nu, qd, tau), rtol=1e-10, atol=1e-10)


def test_inductor_mass_matrix_gradients_match_eager():
    """Compiled with gradients, the mass matrix is assembled as in eager (one batched
    product and a gather; the compiled distinct-entry assembly's backward was contended
    atomic adds): inductor's values and gradients equal eager's, armature included."""
    kd = torchrbd.models.load("humanoid", format="mjcf")
    H, q, *_ = _inputs(kd, B=3)
    W = torch.randn(3, 6 + kd.NDoF, 6 + kd.NDoF, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    torch._dynamo.reset()
    kc = kd.compiled()
    results = []
    for k in (kc, kd):
        x = q.clone().requires_grad_()
        M = k.mass_matrix(H, x)
        results.append((M.detach(), torch.autograd.grad((M * W).sum(), x)[0]))
    torch.testing.assert_close(results[0], results[1], rtol=1e-12, atol=1e-12)


def test_inductor_frame_kinematics_match_eager():
    """forward_kinematics and jacobian compile with their own inductor options
    (KinDynComputations._SHORT_CHAINS): the generated code gives the eager results, for
    a short batch (the chain's kinematics) and a long one (forward kinematics by groups
    of joints, ``kinematics.frame_transforms``)."""
    kd = torchrbd.models.load("arm7")
    torch._dynamo.reset()
    kc = kd.compiled()
    frame = kd.model.link_names[-1]
    for B in (4, DENSE_BELOW):
        H, q, *_ = _inputs(kd, B=B)
        torch.testing.assert_close(kc.forward_kinematics(frame, H, q), kd.forward_kinematics(frame, H, q),
                                   rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(kc.jacobian(frame, H, q), kd.jacobian(frame, H, q), rtol=1e-12, atol=1e-12)


def test_tracing_is_quiet():
    """Compiling a fresh model's methods prints no warning (the cached topology and
    chains are built directly while dynamo traces)."""
    kd = torchrbd.models.load("arm7")
    H, q, *_ = _inputs(kd, B=2)
    torch._dynamo.reset()
    kc = kd.compiled(backend="eager")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        kc.jacobian(kd.model.link_names[-1], H, q)
        kc.mass_matrix(H, q)


def test_inputs_of_another_dtype_convert_the_model_inside_the_graph():
    """The first call with float32 inputs converts the float64 model while tracing:
    no graph break (the armature flag is carried over, not recomputed from data), and
    the armature still counts."""
    kd = torchrbd.models.load("humanoid", format="mjcf")
    H, q, *_ = (x.float() for x in _inputs(kd, B=2))
    torch._dynamo.reset()
    explanation = torch._dynamo.explain(lambda: kd.mass_matrix(H, q))()
    assert explanation.graph_break_count == 0, explanation.break_reasons
    torch._dynamo.reset()
    kc = kd.compiled(backend="eager")
    M = kc.mass_matrix(H, q)
    assert kc._model_for(torch.float32, "cpu").has_armature
    torch.testing.assert_close(M, kd.mass_matrix(H, q))
    bare = kd.model.replace(armature=torch.zeros_like(kd.model.armature))
    assert not bare.has_armature and not bare.to(torch.float32).has_armature


def test_compiled_copy_follows_gravity_and_inertial_parameters():
    """Changing the compiled copy's gravity or link masses changes its results as it
    changes the eager ones (nothing of the old model stays baked into a graph)."""
    kd = torchrbd.models.load("quadruped")
    H, q, nu, qd, tau = _inputs(kd, B=2)
    torch._dynamo.reset()
    kc = kd.compiled(backend="eager")
    calls = (lambda k: k.aba(H, q, nu, qd, tau), lambda k: k.gravity_term(H, q), lambda k: k.mass_matrix(H, q))
    for call in calls:
        call(kc)
    masses = kd.get_inertial_parameters()["mass"]
    for change in (lambda k: setattr(k, "gravity", [0.0, 1.0, -3.0]),
                   lambda k: k.set_inertial_parameters(mass=masses * 1.7)):
        gravity_before = kc.gravity_term(H, q)
        change(kd)
        change(kc)
        for call in calls:
            torch.testing.assert_close(call(kc), call(kd), rtol=1e-10, atol=1e-10)
        assert not torch.allclose(kc.gravity_term(H, q), gravity_before)


def test_every_compiled_method_follows_the_representation():
    """Each method of the compiled copy gives the eager results after each switch of
    representation, however the calls are ordered (one compiled copy throughout)."""
    kd = torchrbd.models.load("quadruped")
    H, q, nu, qd, tau = _inputs(kd, B=2)
    f = "FL_foot"
    calls = {
        "forward_kinematics": lambda k: k.forward_kinematics(f, H, q),
        "jacobian": lambda k: k.jacobian(f, H, q),
        "jacobian_dot": lambda k: k.jacobian_dot(f, H, q, nu, qd),
        "link_velocities": lambda k: k.link_velocities(H, q, nu, qd),
        "CoM_jacobian": lambda k: k.CoM_jacobian(H, q),
        "mass_matrix": lambda k: k.mass_matrix(H, q),
        "centroidal_momentum_matrix": lambda k: k.centroidal_momentum_matrix(H, q),
        "bias_force": lambda k: k.bias_force(H, q, nu, qd),
        "rnea": lambda k: k.rnea(H, q, nu, qd, nu, qd),
        "aba": lambda k: k.aba(H, q, nu, qd, tau),
    }
    torch._dynamo.reset()
    kc = kd.compiled(backend="eager")
    reps = list(torchrbd.Representations)
    for rep in reps + reps[::-1]:
        kd.set_frame_velocity_representation(rep)
        kc.set_frame_velocity_representation(rep)
        for name, call in calls.items():
            call(kc)  # a second call: a cache filled by the first may change the guards
            torch.testing.assert_close(call(kc), call(kd), rtol=1e-10, atol=1e-10, msg=f"{name} in {rep}")


def test_inductor_mass_matrix_and_aba_match_eager():
    """The generated code of the compiled mass matrix (distinct entries, a transpose,
    a gather) and of aba gives the eager results on a branched tree."""
    kd = torchrbd.models.load("quadruped")
    H, q, nu, qd, tau = _inputs(kd, B=5)
    torch._dynamo.reset()
    kc = kd.compiled()
    M = kc.mass_matrix(H, q)
    assert M.is_contiguous()
    torch.testing.assert_close(M, kd.mass_matrix(H, q), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(kc.aba(H, q, nu, qd, tau), kd.aba(H, q, nu, qd, tau), rtol=1e-10, atol=1e-10)


def test_compiled_aba_on_the_tree_path(monkeypatch):
    """Compiled, aba factorises M's tree-sparse entries (from 256 configurations on;
    forced here for a batch of 3): one graph, the eager values and gradients (eager
    takes LAPACK's dense path at this size), a traced check for a singular M, and the
    code inductor generates for it."""
    from torchrbd.algorithms import tree_cholesky

    monkeypatch.setattr(tree_cholesky, "COMPILED_FROM", 1)
    kd = torchrbd.models.load("humanoid")  # branched, with armature
    assert kd.model.has_armature
    H, q, nu, qd, tau = _inputs(kd)
    torch._dynamo.reset()
    explanation = torch._dynamo.explain(lambda: kd.aba(H, q, nu, qd, tau))()
    assert explanation.graph_break_count == 0, explanation.break_reasons
    kc = kd.compiled(backend="eager")
    leaves = [x.clone().requires_grad_() for x in (q, qd, tau)]
    for k in (kc, kd):
        a = k.aba(H, leaves[0], nu, leaves[1], leaves[2])
        grads = torch.autograd.grad(a.square().sum(), leaves)
        if k is kc:
            expected = (a.detach(), grads)
    torch.testing.assert_close((a.detach(), grads), expected, rtol=1e-10, atol=1e-10)

    massless = torchrbd.KinDynComputations(MASSLESS_JOINT_URDF)
    one, zero = torch.ones(1, 1, dtype=torch.float64), torch.zeros(1, 6, dtype=torch.float64)
    with pytest.raises(RuntimeError, match="not positive definite"):
        massless.compiled(backend="eager").aba(torch.eye(4, dtype=torch.float64)[None], one, zero, one, one)

    small = torchrbd.models.load("quadruped")
    H, q, nu, qd, tau = _inputs(small)
    torch._dynamo.reset()
    torch.testing.assert_close(small.compiled().aba(H, q, nu, qd, tau), small.aba(H, q, nu, qd, tau), rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("rep", list(torchrbd.Representations), ids=lambda r: r.name)
def test_compiled_aba_gradients_on_the_tree_path_are_implicit(monkeypatch, rep):
    """Compiled with gradients where the tree-sparse factorisation is taken (forced for a
    batch of 3), aba traces ``forward_dynamics._Implicit``: the factorisation and solve
    without gradients, then one more solve with the kept factor and the RNEA's adjoint
    sweep as the backward. Its gradients w.r.t. the base pose, base and joint velocities,
    joint positions and torques of the branched humanoid with armature match finite
    differences of the compiled function's values."""
    from torch.autograd import gradcheck
    from torchrbd.algorithms import forward_dynamics, tree_cholesky

    monkeypatch.setattr(tree_cholesky, "COMPILED_FROM", 1)
    decided, implicit = [], forward_dynamics.implicit_backward  # (recorded while dynamo traces)
    monkeypatch.setattr(forward_dynamics, "implicit_backward", lambda *t: decided.append(implicit(*t)) or decided[-1])
    kd = torchrbd.models.load("humanoid", format="mjcf")
    assert kd.model.has_armature
    kd.set_frame_velocity_representation(rep)
    _, q, nu, qd, tau = _inputs(kd)
    g = torch.Generator().manual_seed(1)
    r, p = 0.3 * torch.randn(3, 3, generator=g, dtype=torch.float64), torch.randn(3, 3, generator=g, dtype=torch.float64)
    torch._dynamo.reset()
    kc = kd.compiled(backend="eager")

    def f(r, p, q, nu, qd, tau):
        K = torch.zeros(3, 3, 3, dtype=r.dtype)
        K[:, 0, 1], K[:, 0, 2], K[:, 1, 2] = -r[:, 2], r[:, 1], -r[:, 0]
        H = torch.cat([torch.cat([torch.linalg.matrix_exp(K - K.transpose(1, 2)), p[..., None]], 2),
                       torch.tensor([0.0, 0.0, 0.0, 1.0], dtype=r.dtype).expand(3, 1, 4)], 1)
        return kc.aba(H, q, nu, qd, tau) / 100

    inputs = tuple(x.clone().requires_grad_() for x in (r, p, q, nu, qd, tau))
    f(*inputs)
    assert decided == [True], "the compiled aba with gradients did not take the implicit tree path"
    assert gradcheck(f, inputs, eps=1e-6, atol=1e-6, rtol=1e-5)


def test_compiled_aba_gradients_on_the_tree_path_follow_the_inertial_parameters(monkeypatch):
    """The implicit backward of compiled aba (tree path forced for a batch of 3) also
    differentiates the inertial parameters: d|a|^2 / d(mass, com, inertia) equal the
    eager dense path's (a different algorithm: CRBA, LAPACK, ``crba_solve``'s backward).
    The inertias' gradients are compared by their symmetric parts: an antisymmetric
    perturbation of an inertia has no physical meaning, and the two paths read it
    differently."""
    from torchrbd.algorithms import tree_cholesky

    monkeypatch.setattr(tree_cholesky, "COMPILED_FROM", 1)
    torch._dynamo.reset()
    results = []
    for compiled in (False, True):
        kd = torchrbd.models.load("humanoid", format="mjcf")
        k = kd.compiled(backend="eager") if compiled else kd
        H, q, nu, qd, tau = _inputs(kd)
        p = {name: v.detach().clone().requires_grad_() for name, v in kd.get_inertial_parameters().items()}
        k.set_inertial_parameters(mass=p["mass"], com=p["com"], inertia=p["inertia"])
        a = k.aba(H, q, nu, qd, tau)
        mass, com, inertia = torch.autograd.grad(a.square().sum(), [p["mass"], p["com"], p["inertia"]])
        results.append((a.detach(), mass, com, 0.5 * (inertia + inertia.transpose(-1, -2))))
    torch.testing.assert_close(results[1], results[0], rtol=1e-10, atol=1e-10)


def test_compiled_code_reads_the_model_constants_instead_of_rebuilding_them():
    """The compiled copy computes its model's derived constants (index tensors, merged
    body inertias, pose coefficients, chains) before tracing, so the graph takes them
    as inputs; a constant missing at trace time would be recomputed by every call.
    Also after the compiled copy's model changes, and for methods of a fresh instance
    compiled directly (the constructor computes them)."""
    kd = torchrbd.models.load("quadruped")
    H, q, nu, qd, _ = _inputs(kd, B=2)
    inputs = []

    def capture(gm, example_inputs):
        inputs.extend(example_inputs)
        return gm.forward

    def compile_methods(k):  # what a user may write instead of kd.compiled()
        k.bias_force, k.jacobian = (torch.compile(f, backend=capture) for f in (k.bias_force, k.jacobian))
        return k

    changes = (None, lambda k: k.set_inertial_parameters(mass=k.get_inertial_parameters()["mass"] * 1.5))
    for change, compiled in [(c, lambda: kd.compiled(backend=capture)) for c in changes] + [
            (None, lambda: compile_methods(torchrbd.models.load("quadruped")))]:
        torch._dynamo.reset()
        kc = compiled()
        if change is not None:
            change(kc)
        inputs.clear()
        kc.bias_force(H, q, nu, qd)
        kc.jacobian("FL_foot", H, q)
        model = kc._model_for(torch.float64, "cpu")
        body = model.frame("FL_foot")[0]
        cached = model.__dict__
        constants = {"pseudo-inertias": cached.get("_pseudo_inertias"), "pose terms": cached.get("_joint_pose_matrix"),
                     "ancestor columns": getattr(cached.get("_topology"), "ancestor_columns", (None,))[0],
                     "chain": getattr(cached.get("_chains", {}).get(body), "dofs", None)}
        for name, constant in constants.items():
            assert constant is not None and any(x is constant for x in inputs), name


def test_compiled_frame_kinematics_of_a_long_batch_reads_the_frames_constants():
    """A frame's chain's group coefficients (the long-batch ``forward_kinematics``, the
    frame's placement folded in) are made before tracing, for every frame, so that the graph
    takes them as inputs instead of making them in every call: for ``kd.compiled()`` and
    for a fresh instance's method compiled directly. The results stay the eager ones."""
    inputs = []

    def capture(gm, example_inputs):
        inputs.extend(example_inputs)
        return gm.forward

    eager = torchrbd.models.load("quadruped")
    H, q, *_ = _inputs(eager, B=DENSE_BELOW)
    fresh = torchrbd.models.load("quadruped")
    fresh.forward_kinematics = torch.compile(fresh.forward_kinematics, backend=capture)
    for kc in (torchrbd.models.load("quadruped").compiled(backend=capture), fresh):
        for frame in ("FL_foot", "RR_foot"):
            torch._dynamo.reset()
            inputs.clear()
            torch.testing.assert_close(kc.forward_kinematics(frame, H, q), eager.forward_kinematics(frame, H, q))
            cached = kc._model_for(torch.float64, "cpu").__dict__
            coefficients = cached.get("_chain_group_coefficients", {}).get(frame)  # the placement folded in
            assert coefficients is not None and any(x is coefficients for x in inputs), frame


def test_compiled_copy_holds_the_model_in_both_float_dtypes_before_tracing():
    """Float32 inputs to a compiled float64 instance: the copy converted the model to
    float32 and made its constants when it was made, so that the graph takes them as
    inputs (made while tracing, they could not be kept, and each call would convert the
    model and rebuild them). The results stay the eager ones."""
    inputs = []

    def capture(gm, example_inputs):
        inputs.extend(example_inputs)
        return gm.forward

    eager = torchrbd.models.load("quadruped")
    kc = torchrbd.models.load("quadruped").compiled(backend=capture)
    H, q, *_ = (x.float() for x in _inputs(eager, B=DENSE_BELOW))
    torch._dynamo.reset()
    torch.testing.assert_close(kc.forward_kinematics("FL_foot", H, q), eager.forward_kinematics("FL_foot", H, q))
    coefficients = kc._model_for(torch.float32, "cpu").__dict__.get("_chain_group_coefficients", {}).get("FL_foot")
    assert coefficients is not None and coefficients.dtype == torch.float32
    assert any(x is coefficients for x in inputs)


def test_compiled_copy_serves_each_dtype_after_eager_calls_in_both():
    """A compiled copy of an instance that already holds models of two dtypes (eager
    calls in float32 made the second) traces in either: dynamo once failed to name a
    model kept under a dtype key (an internal NameError)."""
    kd = torchrbd.models.load("quadruped")
    H, q, nu, qd, tau = _inputs(kd, B=4)
    kd.jacobian("FL_foot", H.float(), q.float())
    kc = kd.compiled(backend="eager")
    torch._dynamo.reset()
    for dtype in (torch.float32, torch.float64):
        a = [x.to(dtype) for x in (H, q, nu, qd, tau)]
        torch.testing.assert_close(kc.jacobian("FL_foot", *a[:2]), kd.jacobian("FL_foot", *a[:2]))
        torch.testing.assert_close(kc.forward_kinematics("FL_foot", *a[:2]), kd.forward_kinematics("FL_foot", *a[:2]))
        # (compiled and eager aba take different paths, which round differently in float32)
        tol = dict(rtol=1e-4, atol=1e-4) if dtype == torch.float32 else {}
        torch.testing.assert_close(kc.aba(*a), kd.aba(*a), **tol)


def test_compiled_aba_of_a_small_batch_compiles_quietly_and_either_wrapper_agrees():
    """On CPU the compiled copy runs inductor's wrapper in C++; LAPACK's Cholesky of a
    small batch then goes through inductor's proxy executor, whose note is not shown.
    The Python wrapper (``options={"cpp_wrapper": False}``) gives the same values."""
    import logging

    kd = torchrbd.models.load("arm7")
    H, q, nu, qd, tau = _inputs(kd, B=4)
    notes = []

    class Keep(logging.Handler):
        def emit(self, record):
            notes.append(record.getMessage())

    logger = logging.getLogger("torch._inductor.ir")
    handler = Keep(level=logging.DEBUG)
    logger.addHandler(handler)
    try:
        torch._dynamo.reset()
        a = kd.compiled().aba(H, q, nu, qd, tau)
    finally:
        logger.removeHandler(handler)
    assert not [n for n in notes if "proxy executor" in n], notes
    expected = kd.aba(H, q, nu, qd, tau)
    torch.testing.assert_close(a, expected, rtol=1e-10, atol=1e-10)
    b = kd.compiled(options={"cpp_wrapper": False}).aba(H, q, nu, qd, tau)
    torch.testing.assert_close(b, expected, rtol=1e-10, atol=1e-10)


def test_compiled_batch_of_one_matches_pinocchio():
    """Compiled, a batch of one keeps the batch-last multiply-adds (eager squeezes it and
    calls ``bmm``; ``batchlast.one_configuration``), and a frame's chain composes its
    homogeneous local transforms by library products: a random tree (prismatic,
    continuous and fixed joints, arbitrary axes) against Pinocchio, its last link's pose
    and Jacobian, the mass matrix, bias force and aba."""
    import numpy as np
    from pin_reference import MIXED, pin_robot_of
    from random_trees import random_state, tree_from_rng

    rng = np.random.default_rng(5)
    tree = tree_from_rng(rng, max_links=6)
    kd = torchrbd.KinDynComputations(tree.urdf, tree.joints_name_list)
    pin = pin_robot_of(tree, kd.joints_name_list)
    H, q, nu, qd, tau = random_state(rng, kd.NDoF, 1)
    frame = kd.model.link_names[-1]
    torch._dynamo.reset()
    kc = kd.compiled()
    with torch.no_grad():
        got = [kc.forward_kinematics(frame, H, q), kc.jacobian(frame, H, q), kc.mass_matrix(H, q),
               kc.bias_force(H, q, nu, qd), kc.aba(H, q, nu, qd, tau)]
    x = [t[0].numpy() for t in (H, q, nu, qd, tau)]
    z6, zn = np.zeros(6), np.zeros(kd.NDoF)
    expected = [pin.fk(frame, x[0], x[1]), pin.jacobian(MIXED, frame, x[0], x[1]), pin.mass_matrix(MIXED, x[0], x[1]),
                pin.rnea(MIXED, *x[:4], z6, zn), pin.aba(MIXED, *x)]
    for name, value, ref in zip(["fk", "jacobian", "M", "h", "aba"], got, expected):
        assert value.shape[0] == 1, name
        np.testing.assert_allclose(value[0].numpy(), ref, rtol=1e-8, atol=1e-10, err_msg=name)


def test_compiled_long_batch_mass_matrix_matches_pinocchio_in_each_representation(monkeypatch):
    """From ``DENSE_BELOW`` configurations on, compiled code on CPU places the mass
    matrix's distinct entries with an operator of its own (``crba._place_op``, opaque to
    inductor), and from ``tree_sums.LEVEL_SUMS_FROM`` on it sums subtrees level by level
    (composite inertias, rnea's forces): a random tree against Pinocchio, a few
    configurations of the batch, the mass matrix in each representation (MIXED places
    the base rows copied from ``[Mbb | F^T]``, the other two only products), bias force
    and aba in MIXED."""
    import numpy as np
    from pin_reference import MIXED, REPRESENTATIONS, pin_robot_of
    from random_trees import random_state, tree_from_rng

    rng = np.random.default_rng(11)
    tree = tree_from_rng(rng, max_links=6)
    kd = torchrbd.KinDynComputations(tree.urdf, tree.joints_name_list)
    pin = pin_robot_of(tree, kd.joints_name_list)
    B = max(DENSE_BELOW, tree_sums.LEVEL_SUMS_FROM)
    H, q, nu, qd, tau = random_state(rng, kd.NDoF, B)
    traced, level_sums = [], tree_sums.subtree_sums_by_levels
    monkeypatch.setattr(tree_sums, "subtree_sums_by_levels", lambda *a: traced.append(1) or level_sums(*a))
    torch._dynamo.reset()
    kc = kd.compiled()
    checked = (0, 37, B - 1)
    for rep in REPRESENTATIONS:
        kc.set_frame_velocity_representation(rep)
        with torch.no_grad():
            M = kc.mass_matrix(H, q)
        assert M.shape == (B, 6 + kd.NDoF, 6 + kd.NDoF) and M.is_contiguous()
        for b in checked:
            np.testing.assert_allclose(M[b].numpy(), pin.mass_matrix(rep, H[b].numpy(), q[b].numpy()),
                                       rtol=1e-8, atol=1e-10, err_msg=f"{rep} configuration {b}")
    kc.set_frame_velocity_representation(MIXED)
    with torch.no_grad():
        h, acc = kc.bias_force(H, q, nu, qd), kc.aba(H, q, nu, qd, tau)
    zeros = np.zeros(kd.NDoF)
    for b in checked:
        state = (H[b].numpy(), q[b].numpy(), nu[b].numpy(), qd[b].numpy())
        np.testing.assert_allclose(h[b].numpy(), pin.rnea(MIXED, *state, np.zeros(6), zeros),
                                   rtol=1e-8, atol=1e-9, err_msg=f"bias force, configuration {b}")
        np.testing.assert_allclose(acc[b].numpy(), pin.aba(MIXED, *state, tau[b].numpy()),
                                   rtol=1e-7, atol=1e-8, err_msg=f"aba, configuration {b}")
    assert traced  # the level-by-level sums were compiled in


def test_compiled_copies_of_two_robots_of_the_same_size_keep_their_own_code():
    """Compiled methods keep no guards on module globals (``kindyn._non_global_guards``) but
    every guard on the model: two different trees with as many joints and bodies,
    called with inputs of the same shapes, each get their own mass matrix and aba."""
    import numpy as np
    from random_trees import random_state, tree_from_rng

    rng = np.random.default_rng(11)
    trees = {}
    while True:
        tree = tree_from_rng(rng, max_links=5)
        kd = torchrbd.KinDynComputations(tree.urdf, tree.joints_name_list)
        key = (kd.NDoF, kd.model.nbody)
        if key in trees:
            break
        trees[key] = kd
    first, second = trees[key], kd
    H, q, nu, qd, tau = random_state(rng, kd.NDoF, 2)
    torch._dynamo.reset()
    for kd in (first, second, first):
        kc = kd.compiled()
        with torch.no_grad():
            torch.testing.assert_close(kc.mass_matrix(H, q), kd.mass_matrix(H, q), rtol=1e-12, atol=1e-12)
            torch.testing.assert_close(kc.aba(H, q, nu, qd, tau), kd.aba(H, q, nu, qd, tau), rtol=1e-10, atol=1e-10)
    assert not torch.allclose(first.mass_matrix(H, q), second.mass_matrix(H, q))


def test_compiled_trained_parameters_with_inputs_of_another_dtype_trace_in_one_graph():
    """Masses requiring grad on a float64 model and float32 inputs: the compiled copy
    converts the masses in its graph and reuses the rest of the converted model
    (``KinDynComputations._trained_model_for``) without a graph break (``fullgraph``);
    the mass matrix and its gradient with respect to the masses equal the eager ones."""
    torch._dynamo.reset()
    kd = torchrbd.models.load("quadruped")
    mass = kd.get_inertial_parameters()["mass"].clone().requires_grad_(True)
    kd.set_inertial_parameters(mass=mass)
    kc = kd.compiled(backend="eager", fullgraph=True)
    H, q = (x.float() for x in _inputs(kd)[:2])
    results = []
    for k in (kd, kc):
        M = k.mass_matrix(H, q)
        results.append((M.detach(), *torch.autograd.grad(M.square().sum(), mass)))
    assert results[1][0].dtype == torch.float32
    torch.testing.assert_close(results[1], results[0], rtol=1e-5, atol=1e-5)


def _placement_paths():
    from torchrbd.algorithms import placement

    return [True, False] if placement.NATIVE else [False]  # (the C loop where it was built)


@pytest.mark.parametrize("native", _placement_paths(), ids=lambda native: "C-loop" if native else "torch-gather")
@pytest.mark.parametrize("B", [1, 64, 1024])
def test_mass_matrix_placement_operator_matches_its_fake(native, B, monkeypatch):
    """``torchrbd::place_entries``, the compiled mass matrix's one custom operator, gives
    the sizes and strides its fake kernel promises (compiled code runs without inductor's
    size asserts, see ``KinDynComputations._CPU_OPTIONS``), by the C loop and by torch's
    gather."""
    from torchrbd.algorithms import placement
    from torchrbd.algorithms.batchlast import crosswise_empty
    from torchrbd.algorithms.topology import topology

    monkeypatch.setattr(placement, "NATIVE", native)
    topo = topology(torchrbd.models.load("quadruped")._model)
    DT = crosswise_empty(torch.zeros(1, dtype=torch.float64), topo.mass_matrix_entries.shape[0], B)
    DT.copy_(torch.randn(DT.shape, generator=torch.Generator().manual_seed(B), dtype=torch.float64))
    result = torch.library.opcheck(torch.ops.torchrbd.place_entries, (DT, topo.mass_matrix_place))
    assert set(result.values()) == {"SUCCESS"}, result
    placed = torch.ops.torchrbd.place_entries(DT, topo.mass_matrix_place)
    assert torch.equal(placed, DT.t()[:, topo.mass_matrix_place])
