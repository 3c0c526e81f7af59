# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The browser tests read GPUs through the NVML simulator, which lives outside the collection's plugins."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gpufleet.mig.tests.support.simulator import simulator_on_path

simulator_on_path()
