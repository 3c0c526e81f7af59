# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Prometheus, promtool and node_exporter for the rule and scrape tests (Debian's packages, installed when missing),
and the unit tests' fixtures for in-process module runs on simulated hosts."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import shutil

import pytest

from ansible_collections.gpufleet.mig.tests.support.debian import install_debian_packages
# Fixtures shared with the unit tests (the simulator on sys.path, module runs in-process).
from ansible_collections.gpufleet.mig.tests.unit.conftest import run_module  # noqa: F401 pylint: disable=unused-import

# Debian's packages and the commands they bring.
PACKAGES = {'prometheus': ('prometheus', 'promtool'), 'prometheus-node-exporter': ('prometheus-node-exporter',)}


def find_binaries():
    """{command: path} of the commands of PACKAGES that are on PATH."""
    found = {}
    for commands in PACKAGES.values():
        for command in commands:
            path = shutil.which(command)
            if path:
                found[command] = path
    return found


@pytest.fixture(scope='session')
def prometheus_binaries():
    """{command: path} of prometheus, promtool and prometheus-node-exporter; their packages installed when missing."""
    found = find_binaries()
    missing = sorted(package for package, commands in PACKAGES.items() if any(c not in found for c in commands))
    if missing:
        install_debian_packages(missing, 'Prometheus')
        found = find_binaries()
        lacking = sorted(c for commands in PACKAGES.values() for c in commands if c not in found)
        assert not lacking, 'apt-get installed %s but %s is not on PATH' % (' '.join(missing), ', '.join(lacking))
    return found
