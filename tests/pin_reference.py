"""Pinocchio as the independent oracle: the same robot with a free-flyer base,
reduced to the same joint list, and conversions between Pinocchio's LOCAL base
velocity and the three torchrbd representations.

Notation: ``v_l`` is Pinocchio's LOCAL base velocity (body twist), ``nu`` the base
velocity in a torchrbd representation, ``nu = K v_l``.
"""

from __future__ import annotations

import os

import numpy as np
import pinocchio as pin

import torchrbd

BODY = torchrbd.Representations.BODY_FIXED_REPRESENTATION
MIXED = torchrbd.Representations.MIXED_REPRESENTATION
INERTIAL = torchrbd.Representations.INERTIAL_FIXED_REPRESENTATION
REPRESENTATIONS = [BODY, MIXED, INERTIAL]


def skew(v):
    return np.array([[0, -v[2], v[1]], [v[2], 0, -v[0]], [-v[1], v[0], 0]])


def blk(a, b, c, d):
    return np.block([[a, b], [c, d]])


class PinRobot:
    """Pinocchio model of a URDF with a free-flyer, joints reduced to ``joints`` (order kept)."""

    def __init__(self, urdf_path, joints=None, gravity=(0, 0, -9.80665)):
        full = pin.buildModelFromUrdf(str(urdf_path), pin.JointModelFreeFlyer())
        names = list(full.names)[2:]  # skip universe and the free flyer
        movable = [n for n in names if full.joints[full.getJointId(n)].nv == 1]
        joints = list(movable if joints is None else joints)
        lock = [full.getJointId(n) for n in names if n not in joints]
        self.model = pin.buildReducedModel(full, lock, pin.neutral(full)) if lock else full
        self.model.gravity.linear = np.asarray(gravity, float)
        self.data = self.model.createData()
        pin_names = list(self.model.names)[2:]
        self.joints = joints
        self.n = len(joints)
        # our coordinate k <-> Pinocchio joint pin_names.index(joints[k]); with
        # continuous joints Pinocchio uses (cos, sin) in q
        self.idx_q = [self.model.joints[self.model.getJointId(n)].idx_q for n in joints]
        self.idx_v = [self.model.joints[self.model.getJointId(n)].idx_v for n in joints]
        self.nq_of = [self.model.joints[self.model.getJointId(n)].nq for n in joints]
        assert sorted(pin_names) == sorted(joints)

    # ----------------------------------------------------------- state maps
    def q(self, H, qj):
        """Pinocchio configuration from world_H_base (4, 4) and our joint vector."""
        q = np.zeros(self.model.nq)
        q[:3] = H[:3, 3]
        quat = pin.Quaternion(H[:3, :3])
        q[3:7] = [quat.x, quat.y, quat.z, quat.w]
        for k in range(self.n):
            if self.nq_of[k] == 2:
                q[self.idx_q[k]] = np.cos(qj[k])
                q[self.idx_q[k] + 1] = np.sin(qj[k])
            else:
                q[self.idx_q[k]] = qj[k]
        return q

    def P(self):
        """(6+n, 6+n) permutation: Pinocchio velocity vector = P @ ours."""
        P = np.zeros((6 + self.n, 6 + self.n))
        P[:6, :6] = np.eye(6)
        for k, iv in enumerate(self.idx_v):
            P[iv, 6 + k] = 1
        return P

    @staticmethod
    def K(rep, H):
        """(6, 6) nu = K v_l for the base."""
        R, p = H[:3, :3], H[:3, 3]
        z = np.zeros((3, 3))
        if rep is BODY:
            return np.eye(6)
        if rep is MIXED:
            return blk(R, z, z, R)
        return blk(R, skew(p) @ R, z, R)

    @staticmethod
    def Kinv_dot(rep, H, v_l):
        """(6, 6) time derivative of K^{-1} along the base motion v_l (LOCAL)."""
        R, p = H[:3, :3], H[:3, 3]
        z = np.zeros((3, 3))
        if rep is BODY:
            return np.zeros((6, 6))
        W = skew(v_l[3:])
        if rep is MIXED:
            return blk(-W @ R.T, z, z, -W @ R.T)
        Rd = R @ W
        Tb = blk(R, skew(p) @ R, z, R)
        Tbd = blk(Rd, skew(R @ v_l[:3]) @ R + skew(p) @ Rd, z, Rd)
        Tinv = np.linalg.inv(Tb)
        return -Tinv @ Tbd @ Tinv

    def full_K(self, rep, H):
        K = np.eye(6 + self.n)
        K[:6, :6] = self.K(rep, H)
        return K

    def v_local(self, rep, H, nu, qd):
        """Pinocchio velocity (pin order) from our base velocity in rep and joint velocities."""
        v = np.concatenate([np.linalg.solve(self.K(rep, H), nu), qd])
        return self.P() @ v

    def out_frame(self, rep):
        return {BODY: pin.LOCAL, MIXED: pin.LOCAL_WORLD_ALIGNED, INERTIAL: pin.WORLD}[rep]

    # ------------------------------------------------------------ references
    def fk(self, frame, H, qj):
        return self.fk_all([frame], H, qj)[0]

    def fk_all(self, frames, H, qj):
        """(k, 4, 4) world_H_frame of each of ``frames``, from one pass of the kinematics."""
        pin.framesForwardKinematics(self.model, self.data, self.q(H, qj))
        return np.stack([self.data.oMf[self.model.getFrameId(f)].homogeneous for f in frames])

    def jacobian(self, rep, frame, H, qj):
        q = self.q(H, qj)
        J = pin.computeFrameJacobian(self.model, self.data, q, self.model.getFrameId(frame), self.out_frame(rep))
        Kinv = np.linalg.inv(self.full_K(rep, H))
        return J @ self.P() @ Kinv

    def frame_velocity(self, rep, frame, H, qj, nu, qd):
        """(6,) the frame's velocity in rep, linear first (Pinocchio's getFrameVelocity)."""
        return self.frame_velocities(rep, [frame], H, qj, nu, qd)[0]

    def frame_velocities(self, rep, frames, H, qj, nu, qd):
        """(k, 6) each of ``frames``' velocity in rep, from one pass of the kinematics."""
        q, v = self.q(H, qj), self.v_local(rep, H, nu, qd)
        pin.forwardKinematics(self.model, self.data, q, v)
        pin.updateFramePlacements(self.model, self.data)
        return np.stack([pin.getFrameVelocity(self.model, self.data, self.model.getFrameId(f), self.out_frame(rep)).vector
                         for f in frames])

    def jacobian_dot(self, rep, frame, H, qj, nu, qd):
        q, v = self.q(H, qj), self.v_local(rep, H, nu, qd)
        pin.computeJointJacobiansTimeVariation(self.model, self.data, q, v)
        pin.updateFramePlacements(self.model, self.data)
        fid, rf = self.model.getFrameId(frame), self.out_frame(rep)
        J = pin.getFrameJacobian(self.model, self.data, fid, rf) @ self.P()
        Jd = pin.getFrameJacobianTimeVariation(self.model, self.data, fid, rf) @ self.P()
        Kinv = np.linalg.inv(self.full_K(rep, H))
        Kd = np.zeros((6 + self.n, 6 + self.n))
        Kd[:6, :6] = self.Kinv_dot(rep, H, (self.P().T @ v)[:6])
        return Jd @ Kinv + J @ Kd

    def mass_matrix(self, rep, H, qj):
        M = pin.crba(self.model, self.data, self.q(H, qj))
        M = np.triu(M) + np.triu(M, 1).T
        P, Kinv = self.P(), np.linalg.inv(self.full_K(rep, H))
        return Kinv.T @ P.T @ M @ P @ Kinv

    def rnea(self, rep, H, qj, nu, qd, nud, qdd, gravity=True):
        q, v = self.q(H, qj), self.v_local(rep, H, nu, qd)
        P = self.P()
        v_ours = P.T @ v
        a_base = np.linalg.solve(self.K(rep, H), nud) + self.Kinv_dot(rep, H, v_ours[:6]) @ nu
        a = P @ np.concatenate([a_base, qdd])
        g = self.model.gravity.linear.copy()
        if gravity is False:
            self.model.gravity.linear = np.zeros(3)
        elif gravity is not True:  # a gravity vector of its own
            self.model.gravity.linear = np.asarray(gravity, dtype=float)
        tau = pin.rnea(self.model, self.data, q, v, a)
        self.model.gravity.linear = g
        Kinv = np.linalg.inv(self.full_K(rep, H))
        return Kinv.T @ P.T @ tau

    def aba(self, rep, H, qj, nu, qd, tau):
        q, v = self.q(H, qj), self.v_local(rep, H, nu, qd)
        P = self.P()
        a = P.T @ pin.aba(self.model, self.data, q, v, P @ np.concatenate([np.zeros(6), tau]))
        v_ours = P.T @ v
        K = self.K(rep, H)
        base = K @ (a[:6] - self.Kinv_dot(rep, H, v_ours[:6]) @ nu)
        return np.concatenate([base, a[6:]])

    def centroidal(self, rep, H, qj):
        q = self.q(H, qj)
        Ag = pin.computeCentroidalMap(self.model, self.data, q) @ self.P()
        Kinv = np.linalg.inv(self.full_K(rep, H))
        if rep is BODY:
            R = H[:3, :3]
            z = np.zeros((3, 3))
            Ag = blk(R.T, z, z, R.T) @ Ag
        return Ag @ Kinv

    def com(self, H, qj):
        return pin.centerOfMass(self.model, self.data, self.q(H, qj))

    def com_jacobian(self, rep, H, qj):
        J = pin.jacobianCenterOfMass(self.model, self.data, self.q(H, qj)) @ self.P()
        return J @ np.linalg.inv(self.full_K(rep, H))

    def total_mass(self):
        return sum(i.mass for i in self.model.inertias)


def random_pose(rng):
    q = rng.normal(size=4)
    q /= np.linalg.norm(q)
    H = np.eye(4)
    H[:3, :3] = pin.Quaternion(q[0], q[1], q[2], q[3]).toRotationMatrix()
    H[:3, 3] = rng.normal(size=3)
    return H


def pin_robot_of(tree, joints) -> PinRobot:
    """Pinocchio's model of a random tree (``random_trees.RandomTree``), read from a
    temporary URDF file that is removed afterwards."""
    path = tree.write()
    try:
        return PinRobot(path, joints)
    finally:
        os.remove(path)
