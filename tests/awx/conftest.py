# -*- coding: utf-8 -*-
# Copyright: gpufleet.mig contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Shared fixtures of the AWX tests: paths, the environment of Ansible runs, the fake AWX API."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import shutil
import subprocess
import sys

import pytest
import yaml

from ..support.playbook import COLLECTIONS, REPO
from ..support.playbook import ansible_environment as ansible_env

# Like the Makefile's PYTEST_ENV: the collection imports as ansible_collections.gpufleet.mig.
if COLLECTIONS not in sys.path:
    sys.path.insert(0, COLLECTIONS)

# What an AWX project checkout of this repository needs to run the playbooks (simulator/: the
# simulated fleet's NVML simulator and simulator/seed.yml).
PROJECT_CONTENT = ('ansible.cfg', 'galaxy.yml', 'meta', 'plugins', 'roles', 'playbooks', 'inventories', 'simulator')

AWX_VARS_FILE = os.path.join(REPO, 'playbooks', 'vars', 'awx.yml')


def load_yaml(path):
    with open(path) as handle:
        return yaml.safe_load(handle)


def awx_vars():
    """The defaults of playbooks/awx_configure.yml."""
    return load_yaml(AWX_VARS_FILE)


def run(argv, env=None, timeout=300):
    """Run a command from the repository root; returns the CompletedProcess (stdout and stderr merged)."""
    return subprocess.run(argv, cwd=REPO, env=env or ansible_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          universal_newlines=True, timeout=timeout, check=False)


def copy_project(dest):
    """A copy of the repository content a project checkout of AWX would hold."""
    os.makedirs(dest)
    ignore = shutil.ignore_patterns('__pycache__', '*.pyc')
    for name in PROJECT_CONTENT:
        src = os.path.join(REPO, name)
        if os.path.isdir(src):
            shutil.copytree(src, os.path.join(dest, name), ignore=ignore)
        else:
            shutil.copy2(src, os.path.join(dest, name))
    return dest


@pytest.fixture
def ansible_process_env(monkeypatch):
    """This process's environment as ansible_env() makes it, without controller settings: what the playbooks
    that tests.support.playbook.run_playbook starts (ansible-runner) inherit."""
    env = ansible_env()
    for name in ('CONTROLLER_HOST', 'CONTROLLER_OAUTH_TOKEN', 'CONTROLLER_USERNAME', 'CONTROLLER_PASSWORD'):
        env.pop(name, None)
    for name in list(os.environ):
        if name not in env:
            monkeypatch.delenv(name)
    for name, value in env.items():
        monkeypatch.setenv(name, value)


@pytest.fixture
def fake_awx():
    """A fake AWX API v2 on 127.0.0.1 (tests/awx/fake_awx.py); yields (FakeAWX, url)."""
    from .fake_awx import FakeAWX

    fake = FakeAWX(token='fake-token-for-tests')
    url = fake.start()
    try:
        yield fake, url
    finally:
        fake.stop()
