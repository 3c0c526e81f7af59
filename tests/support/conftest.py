# -*- coding: utf-8 -*-
# Copyright: gpufleet.mig contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""tests/support: the simulator package importable (its model tables check the expected layouts), and the tests'
Ansible environment as a fixture."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pytest

from .playbook import ansible_environment
from .simulator import simulator_on_path

simulator_on_path()


@pytest.fixture
def ansible_env(monkeypatch):
    """The environment the tests run Ansible in (tests/support/playbook.py), for one test."""
    for name, value in ansible_environment().items():
        monkeypatch.setenv(name, value)
