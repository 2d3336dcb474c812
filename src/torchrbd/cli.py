"""The ``torchrbd`` command line.

::

    torchrbd models                      # the embedded models
    torchrbd info arm7 [--tree]          # bodies, joints, frames, masses of a model
    torchrbd demo                        # optimise through the simulator, write a plot
    torchrbd render arm7 --q 0 0.5 0 -1 0 0.5 0 --output arm7.png
    torchrbd render rollout.pt --output rollout.gif
    torchrbd bench --quick               # torchrbd vs Pinocchio (and adam)

``MODEL`` is an embedded model name (``torchrbd models``) or a URDF/MJCF path.
Every subcommand has ``--help``. :func:`main` returns the exit status (0 on
success, 2 for a torchrbd error, which is printed without a traceback).
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from pathlib import Path

import torch

from .errors import InputError, TorchRBDError

ROLLOUT_SUFFIXES = (".pt", ".npz")


# ------------------------------------------------------------------ models
def _load(model: str, format: str | None = None):
    """KinDynComputations of an embedded name or a URDF/MJCF path."""
    from .render import as_kindyn

    return as_kindyn(model, format=format)


def _source(model) -> str:
    if model.source is None:
        return "built in memory"
    kind = "MJCF" if str(model.source).lower().endswith(".xml") else "URDF"
    return f"{kind}  {model.source}"


def _num(x: float, width: int = 0) -> str:
    if math.isinf(x):
        s = "inf" if x > 0 else "-inf"
    elif x == 0:
        s = "0"
    else:
        s = f"{x:.4g}"
    return s.rjust(width) if width else s


def _vec(v) -> str:
    return "(" + ", ".join(_num(float(x)) for x in v) + ")"


def _axis(v) -> str:
    """'+y' for a unit coordinate axis, else the vector."""
    v = [float(x) for x in v]
    for i, name in enumerate("xyz"):
        others = [abs(v[j]) for j in range(3) if j != i]
        if max(others) < 1e-9 and abs(abs(v[i]) - 1) < 1e-9:
            return ("+" if v[i] > 0 else "-") + name
    return _vec(v)


def _joint_rows(model) -> list[dict]:
    """One dict per joint coordinate, in coordinate order."""
    from .model.model import JointType

    rows = []
    for k, name in enumerate(model.joint_names):
        b = model.body_dof.index(k)
        jt = JointType(int(model.joint_type[b]))

        def prop(t, default):
            return float(t[k]) if t is not None else default

        rows.append({
            "index": k, "name": name, "type": jt.name.lower(), "axis": _axis(model.joint_axis[b]),
            "lower": prop(model.lower, -math.inf), "upper": prop(model.upper, math.inf),
            "effort": prop(model.effort, math.inf), "damping": prop(model.damping, 0.0),
            "parent": model.body_names[model.body_parent[b]], "child": model.body_names[b], "body": b,
        })
    return rows


def _table(header: list[str], rows: list[list[str]], right: set[int] = frozenset()) -> list[str]:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(header)]

    def line(cells):
        return "  " + "  ".join(c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths)))

    return [line(header).rstrip(), "  " + "  ".join("-" * w for w in widths)] + [line(r).rstrip() for r in rows]


def info_text(model) -> str:
    """The ``torchrbd info`` table of a :class:`~torchrbd.Model`."""
    out = [f"{model.name}  ({_source(model)})"]
    base = (
        "floating: a base pose (base_transform) and 6 base velocity coordinates precede the joints"
        if model.floating
        else "welded to the world (the MJCF has no free joint)"
    )
    g = _vec(model.gravity) if model.gravity is not None else "-"
    out += [
        f"  root link      {model.root}  ({base})",
        f"  DoF            {model.n} joint coordinates; generalized velocity size 6 + {model.n} = {model.n + 6}",
        f"  counts         {model.nbody} bodies, {model.nlink} links, {len(model.extra_frames)} extra frames, "
        f"{len(model.geoms)} collision geoms",
        f"  total mass     {float(model.link_mass.sum()):.4g} kg",
        f"  gravity        {g} m/s^2",
        "",
        "Joints (in coordinate order; limits in rad or m, effort in N m or N)",
    ]
    rows = [
        [str(r["index"]), r["name"], r["type"], r["axis"], _num(r["lower"]), _num(r["upper"]), _num(r["effort"]),
         _num(r["damping"]), f"{r['parent']} -> {r['child']}"]
        for r in _joint_rows(model)
    ]
    out += _table(["#", "joint", "type", "axis", "lower", "upper", "effort", "damping", "parent -> child"],
                  rows, right={0, 4, 5, 6, 7}) if rows else ["  (none)"]
    out += ["", "Links (mass in kg; CoM in the link frame, m; inertia about the CoM, kg m^2)"]
    rows = []
    for k, name in enumerate(model.link_names):
        inertia = model.link_inertia[k]
        rows.append([
            name, model.body_names[model.link_body[k]], f"{float(model.link_mass[k]):.4g}", _vec(model.link_com[k]),
            _vec(inertia.diagonal()), "yes" if float((inertia - inertia.diagonal().diag()).abs().max()) > 0 else "",
        ])
    out += _table(["link", "body", "mass", "CoM", "inertia diag (xx, yy, zz)", "off-diag"], rows, right={2})
    if model.extra_frames:
        out += ["", "Extra frames (MJCF sites; position in the link frame, m)"]
        rows = [[name, model.link_names[k], _vec(pos)] for name, (k, _, pos) in model.extra_frames.items()]
        out += _table(["frame", "on link", "position"], rows)
    if model.geoms:
        out += ["", "Collision geoms (sizes in m: sphere r; capsule/cylinder r, half length; box half extents)"]
        rows = [[g.name or "-", g.link, g.type.name.lower(), _vec(g.size) if g.size else "-", _vec(g.pos)]
                for g in model.geoms]
        out += _table(["geom", "link", "type", "size", "position in link"], rows)
    out += ["", f"Frames (for forward_kinematics / jacobian): {', '.join(model.frame_names())}"]
    return "\n".join(out)


def tree_text(model) -> str:
    """The kinematic tree, drawn like the ``tree`` command."""
    joints = {r["body"]: r for r in _joint_rows(model)}
    children = {b: [] for b in range(model.nbody)}
    for b in range(1, model.nbody):
        children[model.body_parent[b]].append(b)
    index = {name: k for k, name in enumerate(model.link_names)}
    sites = {}
    for name, (k, _, _) in model.extra_frames.items():
        sites.setdefault(k, []).append(name)

    def mass(k):
        return f"{float(model.link_mass[k]):.4g} kg"

    lines = [f"{model.root}  [root, {'floating base' if model.floating else 'fixed base'}]  {mass(index[model.root])}"]

    def walk(b, prefix):
        root_link = index[model.body_names[b]]
        items = []  # (label, sub-callback)
        for name in sites.get(root_link, []):
            items.append((f"{name}  (frame)", None))
        for k, lb in enumerate(model.link_body):
            if lb == b and k != root_link:
                items.append((f"{model.link_names[k]}  (fixed)  {mass(k)}", ("link", k)))
        for c in children[b]:
            j = joints[c]
            bounded = not (math.isinf(j["lower"]) and math.isinf(j["upper"]))
            limits = f" [{_num(j['lower'])}, {_num(j['upper'])}]" if bounded else ""
            items.append((f"{model.body_names[c]}  <- {j['name']} ({j['type']} {j['axis']}{limits})  "
                          f"{mass(index[model.body_names[c]])}", ("body", c)))
        for i, (label, sub) in enumerate(items):
            last = i == len(items) - 1
            lines.append(prefix + ("└── " if last else "├── ") + label)
            deeper = prefix + ("    " if last else "│   ")
            if sub is None:
                continue
            if sub[0] == "body":
                walk(sub[1], deeper)
            else:
                names = sites.get(sub[1], [])
                for m, name in enumerate(names):
                    lines.append(deeper + ("└── " if m == len(names) - 1 else "├── ") + f"{name}  (frame)")

    walk(0, "")
    return "\n".join(lines)


# ------------------------------------------------------------------ commands
def _cmd_models(args) -> int:
    from . import models

    rows = []
    for name in models.names():
        m = _load(name).model
        rows.append([name, ", ".join(models.formats(name)), str(m.n), f"{float(m.link_mass.sum()):.4g}"])
    print("\n".join(_table(["model", "formats", "joints", "mass [kg]"], rows, right={2, 3})))
    print("\nUse a name anywhere a model file is expected: torchrbd info NAME, torchrbd.models.load(NAME), "
          "torchrbd.models.path(NAME).")
    return 0


def _cmd_info(args) -> int:
    model = _load(args.model, args.format).model
    print(tree_text(model) if args.tree else info_text(model))
    return 0


def _cmd_demo(args) -> int:
    from .demo import run_demo

    result = run_demo(
        model=args.model, horizon=args.horizon, iterations=args.iterations, device=args.device,
        output=args.output, progress=not args.no_progress, dt=args.dt, knots=args.knots, verbose=not args.quiet,
    )
    if args.gif:
        from .render import render

        render(args.model, trajectory=result["q"], output=args.gif, dt=result["dt"], progress=not args.no_progress)
        if not args.quiet:
            print(f"animation written to {args.gif}")
    return 0


def _floats(values, what: str):
    try:
        return [float(v) for v in values]
    except ValueError as e:
        raise InputError(f"{what}: expected numbers ({e})") from None


def _cmd_render(args) -> int:
    from .render import load_rollout, render

    target = args.model
    q, trajectory, base, model = None, None, None, target
    if Path(target).suffix.lower() in ROLLOUT_SUFFIXES:
        data = load_rollout(target)
        model = args.robot or data["model"]
        if model is None:
            raise InputError(f"{target} names no model; pass --robot NAME_OR_PATH")
        trajectory, base = data["q"], data["base_transform"]
    elif args.robot:
        raise InputError("--robot is for rollout files (.pt/.npz); give the model as MODEL")
    kd = _load(model, args.format)
    if args.q is not None:
        if trajectory is not None:
            raise InputError("--q draws one configuration; it cannot be combined with a rollout file")
        q = _floats(args.q, "--q")
        if len(q) != kd.NDoF:
            raise InputError(
                f"--q: {kd.model.name} has {kd.NDoF} joints ({', '.join(kd.joints_name_list)}), got {len(q)} values"
            )
    if args.base is not None:
        base = torch.tensor(_floats(args.base, "--base"), dtype=torch.float64)
        if base.shape != (7,):
            raise InputError("--base: expected 7 numbers: x y z qw qx qy qz")
    out = render(
        kd, q=q, base_transform=base, trajectory=trajectory, output=args.output, dt=args.dt, fps=args.fps,
        frames=not args.no_frames, geoms=not args.no_geoms, com=not args.no_com, labels=args.labels,
        elev=args.elev, azim=args.azim, progress=not args.no_progress,
    )
    print(f"wrote {out}")
    return 0


def _cmd_bench(argv) -> int:
    from . import bench

    bench.main(list(argv))
    return 0


# ------------------------------------------------------------------ parser
def build_parser() -> argparse.ArgumentParser:
    from . import __version__

    p = argparse.ArgumentParser(
        prog="torchrbd",
        description="Rigid-body kinematics, dynamics and differentiable simulation in PyTorch.",
        epilog="MODEL is an embedded model name (see 'torchrbd models') or a URDF/MJCF file.",
    )
    p.add_argument("--version", action="version", version=f"torchrbd {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")

    sub.add_parser("models", help="list the embedded models", description="List the embedded models.")

    s = sub.add_parser("info", help="print a model as a table (or its kinematic tree)",
                       description="Bodies, joints (type, axis, limits), links (masses), frames and geoms of a model.")
    s.add_argument("model", metavar="MODEL", help="embedded model name or URDF/MJCF file")
    s.add_argument("--tree", action="store_true", help="draw the kinematic tree instead of the tables")
    s.add_argument("--format", choices=["urdf", "mjcf"], help="file of an embedded model (default: URDF if any)")

    s = sub.add_parser("demo", help="optimise a swing-up through the differentiable simulator",
                       description="Optimise the PD reference that swings the double pendulum (or another model) "
                                   "to its goal, through torchrbd.sim; prints the loss, writes a plot.")
    s.add_argument("--model", default="double_pendulum",
                   help="embedded model (double_pendulum, pendulum, cartpole, arm7) or a URDF/MJCF path")
    s.add_argument("--horizon", type=int, default=30, help="simulated steps (default 30)")
    s.add_argument("--dt", type=float, default=0.05, help="step in seconds (default 0.05)")
    s.add_argument("--iterations", type=int, default=10, help="optimiser iterations at most (default 10)")
    s.add_argument("--knots", type=int, default=8, help="reference knots per joint (default 8)")
    s.add_argument("--device", default="cpu", help="cpu or cuda (default cpu)")
    s.add_argument("--output", default="torchrbd_demo.png", help="plot file (default torchrbd_demo.png)")
    s.add_argument("--gif", default=None, help="also write an animation of the result (.gif or .mp4)")
    s.add_argument("--no-progress", action="store_true", help="no progress bar")
    s.add_argument("--quiet", action="store_true", help="print nothing")

    s = sub.add_parser("render", help="draw a configuration or a saved rollout to PNG/GIF/MP4",
                       description="Draw MODEL at a configuration (PNG), or a rollout file (.pt/.npz with 'q' (T, n) "
                                   "and optional 'base_transform' (T, 4, 4), 'model') as an animation.")
    s.add_argument("model", metavar="MODEL_OR_ROLLOUT",
                   help="embedded model name, URDF/MJCF file, or rollout file (.pt/.npz)")
    s.add_argument("--q", nargs="+", default=None, metavar="Q", help="joint positions (rad or m), one per joint")
    s.add_argument("--base", nargs=7, default=None, metavar=("X", "Y", "Z", "QW", "QX", "QY", "QZ"),
                   help="base pose: position (m) and quaternion w x y z")
    s.add_argument("--robot", default=None, help="model of a rollout file (overrides its 'model' entry)")
    s.add_argument("--format", choices=["urdf", "mjcf"], help="file of an embedded model")
    s.add_argument("--output", default="torchrbd_render.png", help=".png, .gif or .mp4 (default torchrbd_render.png)")
    s.add_argument("--dt", type=float, default=None, help="seconds between rollout samples (shown in the title)")
    s.add_argument("--fps", type=int, default=20, help="animation frames per second (default 20)")
    s.add_argument("--elev", type=float, default=20.0, help="camera elevation, degrees")
    s.add_argument("--azim", type=float, default=-60.0, help="camera azimuth, degrees")
    s.add_argument("--no-frames", action="store_true", help="do not draw link frames")
    s.add_argument("--no-geoms", action="store_true", help="do not draw collision shapes")
    s.add_argument("--no-com", action="store_true", help="do not draw centres of mass")
    s.add_argument("--labels", action="store_true", help="write link names")
    s.add_argument("--no-progress", action="store_true", help="no progress bar while writing an animation")

    sub.add_parser("bench", help="benchmark against Pinocchio and adam (options: torchrbd bench --help)",
                   add_help=False)
    return p


_OPTIONAL = {  # optional dependencies -> what to install
    "matplotlib": "'torchrbd[viz]'", "tqdm": "'torchrbd[viz]'", "mujoco": "'torchrbd[mujoco]'",
    "pinocchio": "'torchrbd[bench]'", "icub_models": "'torchrbd[bench]'",
}

_COMMANDS = {"models": _cmd_models, "info": _cmd_info, "demo": _cmd_demo, "render": _cmd_render}


def main(argv=None) -> int:
    """Run the command line with ``argv`` (default ``sys.argv[1:]``); returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        if argv and argv[0] == "bench":  # its own parser handles the rest
            return _cmd_bench(argv[1:])
        parser = build_parser()
        args = parser.parse_args(argv)
        if args.command is None:
            parser.print_help()
            return 0
        return _COMMANDS[args.command](args)
    except TorchRBDError as e:
        print(f"torchrbd: error: {e}", file=sys.stderr)
        return 2
    except ModuleNotFoundError as e:
        if e.name not in _OPTIONAL:
            raise
        print(f"torchrbd: error: this command needs {e.name}: pip install {_OPTIONAL[e.name]}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # output piped into `head` and the like
        sys.stdout = open(os.devnull, "w")
        return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
