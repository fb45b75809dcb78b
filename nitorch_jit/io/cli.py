"""The ``nitorch-jit reslice`` sub-command: its arguments and its run."""
import argparse
import sys


class _AddTransform(argparse.Action):
    """-l FILE appends (FILE, False); --inverse flips the transform given just before it."""

    def __call__(self, parser, namespace, values, option_string=None):
        items = list(getattr(namespace, "transforms", None) or [])
        if self.const == "inverse":
            if not items:
                parser.error("--inverse applies to the -l/--linear transform given just "
                             "before it; there is none")
            items[-1] = (items[-1][0], not items[-1][1])
        else:
            items.append((values, False))
        namespace.transforms = items


def add_reslice_parser(sub):
    """Add the ``reslice`` sub-command to the sub-parsers `sub` of ``nitorch-jit``."""
    r = sub.add_parser(
        "reslice", help="resample images onto a target grid through transforms (NIfTI, MGH)",
        description="Resample MOVING images onto the grid of TARGET (its shape and affine) "
                    "through affine transforms and a displacement field, interpolating once. "
                    "Needs nibabel: pip install 'nitorch_jit[io]'.")
    r.add_argument("moving", nargs="+", help="images to resample (.nii, .nii.gz, .mgh, .mgz)")
    r.add_argument("-t", "--target", required=True, help="image whose grid the output takes")
    r.add_argument("-l", "--linear", dest="transforms", action=_AddTransform, metavar="AFFINE",
                   help="affine transform file, repeatable, in the order that moves the moving "
                        "image to the target (for ITK/ANTs files, antsApplyTransforms' order): "
                        "FreeSurfer LTA (src -> dst as mri_vol2vol reads "
                        "it), ITK/ANTs text or .mat (target -> moving points, LPS, as "
                        "antsApplyTransforms applies it), or a plain 4x4 RAS-to-RAS matrix "
                        "from moving to target")
    r.add_argument("--inverse", dest="transforms", action=_AddTransform, nargs=0,
                   const="inverse", help="apply the inverse of the -l transform just before")
    r.add_argument("-d", "--displacement", help="displacement field, ITK/ANTs layout "
                   "[X,Y,Z,1,3], mm, LPS, target -> moving points; applied to target points "
                   "before the affines (antsApplyTransforms -t WARP -t AFFINE is "
                   "-d WARP -l AFFINE)")
    r.add_argument("--order", type=int, default=1, choices=range(8), metavar="0..7",
                   help="spline order (default 1; >= 2 applies the spline prefilter)")
    r.add_argument("--bound", default="dct2", help="boundary condition, as grid_pull "
                   "(default dct2)")
    r.add_argument("--extrapolate", action="store_true", help="use the bound outside the "
                   "moving image's field of view (default: 0 there)")
    r.add_argument("--label", action="store_true", help="integer label maps: most likely label")
    r.add_argument("--dtype", help="output data type (default: the moving image's)")
    r.add_argument("--device", default="cpu", help="cpu or cuda (default cpu)")
    g = r.add_mutually_exclusive_group()
    g.add_argument("-o", "--output", help="output file (one moving image)")
    g.add_argument("--suffix", default="_resliced",
                   help="appended to each moving name before its extension (default _resliced)")


def cmd_reslice(args):
    """Run ``nitorch-jit reslice`` with the parsed `args`; return the exit status."""
    from .reslice import ResliceError, run_cli  # numpy, nibabel: only when asked for
    try:
        return run_cli(args)
    except (ResliceError, ImportError) as e:
        print(f"nitorch-jit reslice: {e}", file=sys.stderr)
        return 1
