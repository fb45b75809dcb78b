"""File front ends: ``reslice`` (resample NIfTI / MGH images through transforms and a
displacement field) and the transform readers it uses.

``nitorch_jit.reslice`` is the function ``nitorch_jit.io.reslice.reslice``; this package
imports nothing itself, so ``import nitorch_jit`` never needs numpy or nibabel.
"""
