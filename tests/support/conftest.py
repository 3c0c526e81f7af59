# -*- coding: utf-8 -*-
# Copyright: gpufleet.mig contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""tests/support: the simulator package importable (its model tables check the expected layouts)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from .simulator import simulator_on_path

simulator_on_path()
