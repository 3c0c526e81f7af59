# -*- coding: utf-8 -*-
# Copyright: gpufleet.mig contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
#
# Private module utils of gpufleet.mig: the interface may change at any time.

"""The one base class of the failures the host code explains in its message."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type


class GpufleetError(Exception):
    """A failure whose message is the whole story (what, where, what to do): a module reports it without a traceback.

    Anything else that escapes a module is unexpected and is reported with its traceback (_module_support.run_module).
    """
