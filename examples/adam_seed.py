"""adam's "PyTorch Backend" documentation page, run top to bottom on torchrbd.

Every snippet of the page is here, in its order, with only the imports changed
(``import torchrbd as adam``, ``from torchrbd import KinDynComputations``). Where the
page leaves a name undefined or could not run as written, the fix is marked
``# seed:`` in place:

* ``base_vel`` / ``joints_vel`` (learning-based control) are zeros of shape (6,), (n,).
* the policy's ``nn.Linear`` layers are float32 while ``joints`` is float64; PyTorch
  refuses the mixed matmul, so the policy is moved to float64 (and to the device).
* trajectory evaluation: ``w_H_b_batch`` has ``batch_size`` rows, so
  ``trajectory_length = batch_size`` (batch shapes broadcast), and
  ``trajectory_configs`` is float64 (torchrbd never casts silently).
* simulation rollouts: the page's ``batch_size = 256`` would leave its tensors at the
  old size, so the rollout takes the first 256 rows of the batch above; "Update
  joints..." is a semi-implicit Euler step through ABA (base pose kept).
* mini-batches: ``configs`` / ``total_configs`` are the batch above; ``kinDyn_batch``
  is the compatibility alias ``KinDynComputationsBatch``.
* ``pin_memory=True`` needs an accelerator, so that line runs only with CUDA.
* ``torch.set_default_dtype(torch.float64)`` is undone when :func:`main` returns.
* MuJoCo: the page downloads ``g1_mj_description`` with robot_descriptions; this
  script stays offline and loads torchrbd's embedded ``humanoid`` MJCF instead.

Run ``python examples/adam_seed.py`` (``main(batch_size=1024, steps=100)`` as on the page).
"""

import numpy as np
import torch

import torchrbd as adam
from torchrbd import KinDynComputations


def main(batch_size=1024, steps=100):
    """Run every section; return the computed tensors by name (for the tests)."""
    default_dtype = torch.get_default_dtype()
    try:
        return _run(batch_size, steps)
    finally:
        torch.set_default_dtype(default_dtype)


def _run(batch_size, steps):
    out = {}

    # ------------------------------------------------------------ Basic Usage
    import icub_models

    # Load model
    model_path = icub_models.get_model_file("iCubGazeboV2_5")
    joints_name_list = [
        'torso_pitch', 'torso_roll', 'torso_yaw', 'l_shoulder_pitch',
        'l_shoulder_roll', 'l_shoulder_yaw', 'l_elbow', 'r_shoulder_pitch',
        'r_shoulder_roll', 'r_shoulder_yaw', 'r_elbow', 'l_hip_pitch', 'l_hip_roll',
        'l_hip_yaw', 'l_knee', 'l_ankle_pitch', 'l_ankle_roll', 'r_hip_pitch',
        'r_hip_roll', 'r_hip_yaw', 'r_knee', 'r_ankle_pitch', 'r_ankle_roll'
    ]

    kinDyn = KinDynComputations(model_path, joints_name_list)
    kinDyn.set_frame_velocity_representation(adam.Representations.MIXED_REPRESENTATION)

    # Define state
    w_H_b = torch.tensor(np.eye(4), dtype=torch.float64)
    joints = torch.ones(len(joints_name_list), dtype=torch.float64) * 0.1

    # Compute
    M = kinDyn.mass_matrix(w_H_b, joints)
    print(f"Mass matrix shape: {M.shape}")
    out["M"] = M

    # ------------------------------------------------------------ GPU Support
    device = torch.device('cuda' if torch.cuda.is_available() else 'cpu')

    # Move tensors to GPU
    w_H_b = torch.tensor(np.eye(4), dtype=torch.float64, device=device)
    joints = torch.ones(len(joints_name_list), dtype=torch.float64, device=device) * 0.1

    # Compute on GPU
    M = kinDyn.mass_matrix(w_H_b, joints)
    print(f"Computation device: {M.device}")
    out["M_device"] = M

    # ------------------------------------------------ Automatic Differentiation
    # Enable gradient computation
    w_H_b.requires_grad = True
    joints.requires_grad = True

    # Forward pass
    M = kinDyn.mass_matrix(w_H_b, joints)
    loss = M.trace()

    # Backward pass
    loss.backward()

    print(f"Gradient w.r.t. joints:\n{joints.grad}")
    out["joints_grad"] = joints.grad

    # ------------------------------------------------------- Common Operations
    # Jacobian
    J = kinDyn.jacobian('l_sole', w_H_b, joints)
    print(f"Jacobian shape: {J.shape}")

    # Forward Kinematics
    w_H_f = kinDyn.forward_kinematics('l_sole', w_H_b, joints)
    print(f"End-effector transform:\n{w_H_f}")

    # Center of Mass
    com = kinDyn.CoM_position(w_H_b, joints)
    J_com = kinDyn.CoM_jacobian(w_H_b, joints)
    out.update(J=J, w_H_f=w_H_f, com=com, J_com=J_com)

    # ------------------------------------------------- Learning-Based Control
    import torch.nn as nn

    class ControlPolicy(nn.Module):
        def __init__(self, n_dof):
            super().__init__()
            self.net = nn.Sequential(
                nn.Linear(n_dof, 64),
                nn.ReLU(),
                nn.Linear(64, n_dof)
            )

        def forward(self, joints):
            return self.net(joints)

    # Use with adam
    policy = ControlPolicy(len(joints_name_list))
    policy = policy.to(device=device, dtype=torch.float64)  # seed: layers default to float32
    action = policy(joints)

    # seed: base_vel and joints_vel are not defined on the page; zero velocities
    base_vel = torch.zeros(6, dtype=torch.float64, device=device)
    joints_vel = torch.zeros(len(joints_name_list), dtype=torch.float64, device=device)

    # Compute acc
    acc = kinDyn.aba(
        w_H_b, joints, base_vel,
        joints_vel, action
    )
    out.update(action=action, acc=acc)

    # --------------------------------------------------------- Batch Processing
    kinDyn = KinDynComputations(model_path, joints_name_list)
    kinDyn.set_frame_velocity_representation(adam.Representations.MIXED_REPRESENTATION)

    # Create batch (batch dimension is FIRST)
    w_H_b_batch = torch.tile(torch.eye(4, dtype=torch.float64), (batch_size, 1, 1))
    joints_batch = torch.randn(batch_size, len(joints_name_list), dtype=torch.float64)

    # Compute for all configurations at once
    M_batch = kinDyn.mass_matrix(w_H_b_batch, joints_batch)
    print(f"Output shape: {M_batch.shape}")  # (batch_size, 6+n_dof, 6+n_dof)
    out["M_batch"] = M_batch

    # Batch Computations
    J_batch = kinDyn.jacobian('l_sole', w_H_b_batch, joints_batch)
    # Shape: (batch_size, 6, 6+n)

    w_H_f_batch = kinDyn.forward_kinematics('l_sole', w_H_b_batch, joints_batch)
    # Shape: (batch_size, 4, 4)

    Ag_batch = kinDyn.centroidal_momentum_matrix(w_H_b_batch, joints_batch)
    # Shape: (batch_size, 6, 6+n)
    out.update(J_batch=J_batch, w_H_f_batch=w_H_f_batch, Ag_batch=Ag_batch)

    # Batch Gradients
    w_H_b_batch.requires_grad = True
    joints_batch.requires_grad = True

    # Forward pass
    M_batch = kinDyn.mass_matrix(w_H_b_batch, joints_batch)
    loss = M_batch.mean()

    # Backward pass through entire batch
    loss.backward()

    print(f"Gradient shape: {joints_batch.grad.shape}")
    out["joints_batch_grad"] = joints_batch.grad

    # ------------------------------------------------------- Batch Use Cases
    # Trajectory Evaluation
    n_dof = len(joints_name_list)
    trajectory_length = batch_size  # seed: must broadcast with w_H_b_batch (batch_size, 4, 4)

    # Evaluate entire trajectory
    trajectory_configs = torch.randn(trajectory_length, n_dof, dtype=torch.float64)  # seed: float64

    # Compute Jacobians for all configurations
    J_trajectory = kinDyn.jacobian('l_sole', w_H_b_batch, trajectory_configs)
    out["J_trajectory"] = J_trajectory

    # Simulation Rollouts
    # Simulate multiple trajectories in parallel
    # seed: the page sets batch_size = 256 here; the rollout runs the first 256 rows
    # of the batch above (its own state, without gradients)
    rollout_batch_size = min(256, batch_size)
    trajectory_steps = steps
    dt = 0.001
    w_H_b_sim = w_H_b_batch.detach()[:rollout_batch_size]
    sim_joints = joints_batch.detach()[:rollout_batch_size].clone()
    sim_joints_vel = torch.zeros_like(sim_joints)
    sim_base_vel = torch.zeros(rollout_batch_size, 6, dtype=torch.float64)
    sim_tau = torch.zeros_like(sim_joints)

    with torch.no_grad():
        for step in range(trajectory_steps):
            # Compute dynamics for all parallel simulations
            M_batch = kinDyn.mass_matrix(w_H_b_sim, sim_joints)
            # Update joints... (seed: semi-implicit Euler of the free-floating robot, base pose kept)
            acc = kinDyn.aba(w_H_b_sim, sim_joints, sim_base_vel, sim_joints_vel, sim_tau)
            sim_base_vel = sim_base_vel + dt * acc[:, :6]
            sim_joints_vel = sim_joints_vel + dt * acc[:, 6:]
            sim_joints = sim_joints + dt * sim_joints_vel
    out.update(M_rollout=M_batch, rollout_joints=sim_joints)

    # ------------------------------------------------- Batch Tips and Tricks
    # Shape Requirements: batch dimension is first
    print(w_H_b_batch.shape)  # (batch, 4, 4)
    print(joints_batch.shape)  # (batch, n_dof)

    # Consistent dtypes
    # All tensors should have same dtype
    assert w_H_b_batch.dtype == joints_batch.dtype
    assert w_H_b_batch.dtype == torch.float64  # Recommended

    # Memory usage for large batches
    # For very large batches, use smaller mini-batches
    mini_batch_size = 256  # Adjust based on GPU memory
    mini_batch_size = min(mini_batch_size, max(1, batch_size // 2))  # seed: at least two chunks here
    kinDyn_batch = adam.KinDynComputationsBatch(model_path, joints_name_list)  # seed: not defined on the page
    configs = joints_batch.detach()  # seed: not defined on the page
    total_configs = len(configs)

    # Process in chunks
    results = []
    for i in range(0, total_configs, mini_batch_size):
        batch = configs[i:i+mini_batch_size]
        result = kinDyn_batch.mass_matrix(w_H_b_batch[:len(batch)], batch)
        results.append(result)
    out["mini_batch_results"] = results

    # --------------------------------------------------------- Performance Tips
    # Use float64 for stability (recommended)
    torch.set_default_dtype(torch.float64)

    # Pin memory for faster CPU-GPU transfer (seed: pinning needs an accelerator)
    if torch.cuda.is_available():
        w_H_b = torch.tensor(np.eye(4), dtype=torch.float64, pin_memory=True)

    # Use in-place operations carefully
    # Be careful with requires_grad when using in-place ops
    joints = joints.clone().detach().requires_grad_(True)

    # ------------------------------------------------------- Loading from MuJoCo
    import mujoco

    # Load MuJoCo model
    # seed: the page calls robot_descriptions' load_robot_description("g1_mj_description"),
    # which downloads the model; this script stays offline and uses the humanoid MJCF
    # embedded in torchrbd (a free-joint torso with 18 hinges)
    import torchrbd.models

    mj_model = mujoco.MjModel.from_xml_path(str(torchrbd.models.path("humanoid", "mjcf")))

    kinDyn = KinDynComputations.from_mujoco_model(mj_model)
    kinDyn.set_frame_velocity_representation(adam.Representations.MIXED_REPRESENTATION)

    # Use with PyTorch
    w_H_b = torch.eye(4, dtype=torch.float64)
    joints = torch.zeros(kinDyn.NDoF, dtype=torch.float64, requires_grad=True)

    M = kinDyn.mass_matrix(w_H_b, joints)
    loss = M.trace()
    loss.backward()  # Gradients in joints.grad
    out.update(M_mujoco=M, mujoco_joints_grad=joints.grad, mujoco_ndof=kinDyn.NDoF)
    return out


if __name__ == "__main__":
    main()
