# -*- coding: utf-8 -*-
# Copyright: gpufleet.mig contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""gpufleet.mig's NVML simulator: a fake ``libnvidia-ml`` for the real ``pynvml`` bindings.

A test double, never shipped to a GPU host: it lives outside the collection's plugins, and the
NVML backend imports it only when ``GPUFLEET_MIG_SIMULATOR`` names a state file and this
package's folder (the repository's ``simulator/``) is on ``PYTHONPATH``. See docs/simulator.md.

Modules: ``errors`` (NVML return codes), ``abi`` (ctypes marshalling), ``models`` (one table per
GPU model), ``rules`` (MIG rules), ``state`` (the state file, call log, faults), ``host_events``
(reset, reboot, processes and clients), ``library`` (the simulated C symbols).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from gpufleet_nvml_sim.errors import ERRORS, SimulatorError  # noqa: F401  (the package's public interface)
from gpufleet_nvml_sim.host_events import (  # noqa: F401
    HOST_EVENTS, set_clients, set_mig_clients, set_pids, simulate_gpu_reset, simulate_reboot)
from gpufleet_nvml_sim.library import MUTATING_CALLS, SYMBOLS, SimulatedNvml, install, uninstall  # noqa: F401
from gpufleet_nvml_sim.models import MODELS, UnknownModel, get_model, mode_applies_immediately  # noqa: F401
from gpufleet_nvml_sim.state import call_log_path, load_state, read_call_log, write_state  # noqa: F401

SIMULATOR_ENV = 'GPUFLEET_MIG_SIMULATOR'
