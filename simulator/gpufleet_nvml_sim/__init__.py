# -*- coding: utf-8 -*-
# Copyright: gpufleet.mig contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""gpufleet.mig's NVML simulator: a fake ``libnvidia-ml`` for the real ``pynvml`` bindings.

A test double, never shipped to a GPU host: it lives outside the collection's plugins, and the
NVML backend imports it only when ``GPUFLEET_MIG_SIMULATOR`` names a state file and this
package's folder (the repository's ``simulator/``) is on ``PYTHONPATH``. See docs/simulator.md.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from gpufleet_nvml_sim.library import (  # noqa: F401  (the package's public interface)
    ERRORS,
    HOST_EVENTS,
    MUTATING_CALLS,
    SIMULATOR_ENV,
    SYMBOLS,
    SimulatedNvml,
    SimulatorError,
    call_log_path,
    install,
    load_state,
    read_call_log,
    set_pids,
    simulate_gpu_reset,
    simulate_reboot,
    uninstall,
    write_state,
)
from gpufleet_nvml_sim.models import MODELS, UnknownModel, get_model, mode_applies_immediately  # noqa: F401
