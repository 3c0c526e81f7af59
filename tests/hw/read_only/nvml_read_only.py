# -*- coding: utf-8 -*-
# Copyright: gpufleet.mig contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The hardware check's read-only guard: in its processes, an NVML call that is not a read never reaches the driver.

pynvml resolves every C symbol through one function, ``pynvml._nvmlGetFunctionPointer(name)`` (nvidia-ml-py's
pynvml.py: each wrapper calls it before the C function). :func:`install` puts a guard in front of it that lets
through only the calls that read: ``nvmlInit*``, ``nvmlShutdown``, ``nvmlErrorString`` and the
``nvml<object>Get|Is|Query...`` calls. Everything else (nvmlDeviceSetMigMode, nvmlDeviceCreateGpuInstance[WithPlacement],
nvmlGpuInstanceCreateComputeInstance[WithPlacement], nvmlGpuInstanceDestroy, nvmlComputeInstanceDestroy,
nvmlDeviceResetGpuLockedClocks, nvmlDeviceModifyDrainState, nvmlDeviceRemoveGpu, every Set/Clear/Register...) is
refused with :class:`ReadOnlyRefusal`, an ``NVMLError`` (NVML_ERROR_NO_PERMISSION) that names the call: a call
that is not known to read is refused, so a new one in a later pynvml is refused too.

hw-check installs it in its own process and, through ``sitecustomize.py`` beside this file (the folder first on
PYTHONPATH), in every Python process its ansible-playbook run starts: the controller and each module's. Importable
both as ``nvml_read_only`` (there) and as ``tests.hw.read_only.nvml_read_only``.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import re

# Calls that open or close the session or explain an error code.
SESSION_CALLS = ('nvmlInit', 'nvmlInit_v2', 'nvmlInitWithFlags', 'nvmlShutdown', 'nvmlErrorString')
# nvml<object><verb>...: the objects NVML's read calls name, and the verbs that read.
READ_CALL = re.compile(r'^nvml(?:System|Device|Unit|GpuInstance|ComputeInstance|VgpuInstance|VgpuType|Gpm)?(?:Get|Is|Query)(?=[A-Z0-9_]|$)')
GUARD_MARK = '_gpufleet_read_only_guard'


def is_read_call(name):
    """Whether the NVML C function ``name`` only reads (see the module's docstring)."""
    return name in SESSION_CALLS or bool(READ_CALL.match(name))


def _refusal_class(pynvml):
    class ReadOnlyRefusal(pynvml.NVMLError):
        """An NVML call refused by the read-only guard before it reached the driver."""

        def __new__(cls, call):
            refusal = Exception.__new__(cls)
            refusal.value = pynvml.NVML_ERROR_NO_PERMISSION
            refusal.call = call
            return refusal

        def __init__(self, call):
            super(ReadOnlyRefusal, self).__init__(call)

        def __str__(self):
            return '%s refused: the hardware check is read-only, no NVML call that changes a GPU reaches the driver' % self.call
    return ReadOnlyRefusal


def install(pynvml):
    """Guard ``pynvml``'s symbol lookup (once per process); returns the refusal class."""
    guard = getattr(pynvml, GUARD_MARK, None)
    if guard is not None:
        return guard.refusal
    lookup = pynvml._nvmlGetFunctionPointer
    refusal = _refusal_class(pynvml)

    def guarded_lookup(name):
        if not is_read_call(name):
            raise refusal(name)
        return lookup(name)
    guarded_lookup.refusal = refusal
    guarded_lookup.unguarded = lookup
    pynvml._nvmlGetFunctionPointer = guarded_lookup
    setattr(pynvml, GUARD_MARK, guarded_lookup)
    return refusal


def installed(pynvml):
    return getattr(pynvml, GUARD_MARK, None) is not None


def uninstall(pynvml):
    """Take the guard away again (the tests, which share one pynvml with other tests)."""
    guard = getattr(pynvml, GUARD_MARK, None)
    if guard is not None:
        pynvml._nvmlGetFunctionPointer = guard.unguarded
        delattr(pynvml, GUARD_MARK)


def install_in_this_process():
    """What sitecustomize.py runs at the start of every Python process of the check: guard pynvml if there is one."""
    try:
        import pynvml
    except ImportError:
        return None
    return install(pynvml)


def require_installed():
    """Exit non-zero unless this process's pynvml is guarded: the check's first task proves the module processes are."""
    import pynvml
    if not installed(pynvml):
        raise SystemExit('the read-only NVML guard is not installed in this process (PYTHONPATH does not start with %s)'
                         % os.path.dirname(os.path.abspath(__file__)))
    print('read-only NVML guard installed')
