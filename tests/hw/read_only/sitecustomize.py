# -*- coding: utf-8 -*-
# Copyright: gpufleet.mig contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Run by every Python process the hardware check starts (this folder is first on their PYTHONPATH): from its first
line on, pynvml answers only read calls (nvml_read_only). Shadows any other sitecustomize in those processes."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import nvml_read_only

nvml_read_only.install_in_this_process()
