"""torchrbd: rigid-body kinematics, dynamics and differentiable simulation, native to PyTorch.

Drop-in for adam's PyTorch backend::

    import torchrbd as adam
    from torchrbd import KinDynComputations
"""

from . import perf, vml_warmup
from .algorithms.representation import Representations
from .errors import (
    FrameNotFoundError,
    InputError,
    JointNotFoundError,
    ModelError,
    SimulationError,
    TorchRBDError,
)
from .kindyn import KinDynComputations, KinDynComputationsBatch
from .model import Model

__version__ = "0.1.0"

perf.apply_default()  # glibc keeps freed pages for reuse; TORCHRBD_TUNE_MALLOC=0 opts out (see perf.py)
vml_warmup.warm_up()  # MKL picks its math kernels before any parallel call (see vml_warmup.py)

__all__ = [
    "KinDynComputations", "KinDynComputationsBatch", "Representations", "Model",
    "TorchRBDError", "ModelError", "FrameNotFoundError", "JointNotFoundError", "InputError", "SimulationError",
]
