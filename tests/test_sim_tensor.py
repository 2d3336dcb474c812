"""gs.Tensor (scene-tracked tensors), gs.init and the tensor factories."""

import pickle

import pytest
import torch

import torchrbd.sim as gs
from torchrbd.errors import InputError, SimulationError

BOX = dict(size=(0.2, 0.3, 0.4), pos=(0.0, 0.0, 1.0))


pytestmark = pytest.mark.usefixtures("sim_float64_one_thread")


def _scene(requires_grad=True):
    scene = gs.Scene(sim_options=gs.options.SimOptions(requires_grad=requires_grad))
    box = scene.add_entity(gs.morphs.Box(**BOX))
    scene.build()
    return scene, box


def test_getters_return_scene_tensors_and_ops_keep_the_scene():
    scene, box = _scene()
    pos = box.get_pos()
    assert isinstance(pos, gs.Tensor) and isinstance(pos, torch.Tensor)
    assert pos.scene is scene
    for derived in (pos * 2, pos + torch.ones(3, dtype=pos.dtype), torch.cat([pos, pos]), pos.sum(), pos[0],
                    torch.nn.functional.relu(pos), pos @ pos):
        assert isinstance(derived, gs.Tensor) and derived.scene is scene
    a, b = torch.split(pos, [1, 2])
    assert a.scene is scene and b.scene is scene
    # sceneless gs tensors mix in freely; the result keeps the scene
    target = gs.tensor([1.0, 0.0, 0.5])
    assert target.scene is None
    assert (pos - target).scene is scene
    assert repr(pos).startswith("gs.Tensor(") and scene.uid in repr(pos)


def test_mixing_two_scenes_raises_a_clear_error():
    s1, b1 = _scene()
    s2, b2 = _scene()
    with pytest.raises(InputError, match="two scenes"):
        b1.get_pos() + b2.get_pos()
    with pytest.raises(InputError, match="two scenes"):
        torch.stack([b1.get_pos(), b2.get_pos()])
    # a scene tensor handed to another scene's setter is refused too
    with pytest.raises(InputError, match="belongs to scene"):
        b2.set_pos(b1.get_pos())
    # after sceneless() it is fine
    b2.set_pos(b1.get_pos().sceneless())


def test_detach_sceneless_zero_grad_and_asserts():
    scene, box = _scene()
    pos = box.get_pos()
    assert pos.requires_grad  # connected to the graph (requires_grad=True scene)
    d = pos.detach()
    assert d.scene is None and not d.requires_grad
    d2 = pos.detach(sceneless=False)
    assert d2.scene is scene and not d2.requires_grad
    s = pos.sceneless()
    assert s.scene is None and s.requires_grad  # a clone: still in the graph
    s.assert_sceneless()
    with pytest.raises(SimulationError, match="sceneless"):
        pos.assert_sceneless()
    pos.assert_contiguous()
    with pytest.raises(InputError, match="contiguous"):
        gs.zeros(3, 4).t().assert_contiguous()
    x = gs.ones(3, requires_grad=True)
    (x * 2).sum().backward()
    assert torch.equal(x.grad, torch.full((3,), 2.0, dtype=x.dtype))
    x.zero_grad()
    assert torch.equal(x.grad, torch.zeros(3, dtype=x.dtype))
    # pickling keeps the values, drops the scene
    y = pickle.loads(pickle.dumps(pos.detach(sceneless=False)))
    assert isinstance(y, gs.Tensor) and y.scene is None and torch.equal(y, pos.detach())


def test_factories_use_the_init_precision_and_device():
    gs.init(backend=gs.cpu, precision="32")
    try:
        assert gs.tensor([1.0, 2.0]).dtype == torch.float32
        assert gs.tc_float == torch.float32
        scene, box = _scene()
        assert box.get_pos().dtype == torch.float32
    finally:
        gs.init(backend=gs.cpu, precision="64")
    assert gs.device == torch.device("cpu")
    assert gs.tensor([1.0]).dtype == torch.float64
    assert gs.tensor([1, 2]).dtype == torch.int64
    assert gs.tensor([1, 2], dtype=float).dtype == torch.float64
    assert gs.zeros(2, 3).shape == (2, 3) and gs.zeros((2, 3)).shape == (2, 3)
    r = gs.rand(size=(4, 3), requires_grad=True)
    assert r.is_leaf and r.requires_grad and r.scene is None and isinstance(r, gs.Tensor)
    assert gs.from_numpy(__import__("numpy").ones(3)).dtype == torch.float64
    t = torch.ones(2, requires_grad=True)
    kept = gs.from_torch(t * 3, detach=False)
    assert kept.grad_fn is not None
    for f in (gs.ones_like, gs.zeros_like, gs.rand_like, gs.randn_like):
        assert f(t).shape == (2,)
    assert gs.eye(3).shape == (3, 3) and gs.arange(4).dtype == torch.int64
    assert gs.full((2,), 7.0)[0] == 7.0 and gs.linspace(0, 1, 5).shape == (5,)


def test_init_rejects_bad_settings():
    with pytest.raises(InputError, match="precision"):
        gs.init(precision="16")
    with pytest.raises(InputError, match="backend"):
        gs.init(backend="tpu")
    if not torch.cuda.is_available():
        with pytest.raises(SimulationError, match="cuda"):
            gs.init(backend=gs.gpu)
    gs.init(backend=gs.cpu, precision="64", seed=3)
    a = gs.rand(3)
    gs.init(backend=gs.cpu, precision="64", seed=3)
    assert torch.equal(a, gs.rand(3))
