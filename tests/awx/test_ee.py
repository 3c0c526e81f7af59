# -*- coding: utf-8 -*-
# Copyright: gpufleet.mig contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""execution-environment.yml: ansible-builder create writes the build context offline, with our requirements.

The steps are those of ``make ee-context``, on a copy: build the collection tarball into
build/ee/, then ``ansible-builder create``. The versions in the EE are those the tests run with.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import re
import shutil
import tarfile

import pytest
import yaml

from .conftest import REPO, load_yaml, run

pytest.importorskip('ansible_builder')

EE_FILE = os.path.join(REPO, 'execution-environment.yml')


def pins(path):
    """{normalised name: version} of the ``name==version`` lines of a requirements file."""
    found = {}
    with open(path) as handle:
        for line in handle:
            match = re.match(r'^([A-Za-z0-9_.-]+)==([^\s#]+)', line.strip())
            if match:
                found[match.group(1).lower().replace('_', '-')] = match.group(2)
    return found


def shipped_collection_version(namespace, name):
    """Version of a collection the venv's ``ansible`` package ships (what the tests run with)."""
    import ansible_collections

    for base in ansible_collections.__path__:
        manifest = os.path.join(base, namespace, name, 'MANIFEST.json')
        if os.path.isfile(manifest):
            with open(manifest) as handle:
                return json.load(handle)['collection_info']['version']
    raise AssertionError('%s.%s is not installed' % (namespace, name))


def test_ee_definition_is_v3_and_matches_the_tested_versions():
    ee = load_yaml(EE_FILE)
    assert ee['version'] == 3
    deps = ee['dependencies']
    constraints = pins(os.path.join(REPO, 'requirements', 'constraints.txt'))
    assert deps['ansible_core']['package_pip'] == 'ansible-core==%s' % constraints['ansible-core']
    assert deps['ansible_runner']['package_pip'] == 'ansible-runner==%s' % constraints['ansible-runner']
    for key in ('galaxy', 'python', 'system'):
        assert os.path.isfile(os.path.join(REPO, deps[key])), deps[key]
    python = pins(os.path.join(REPO, deps['python']))
    for package in ('kubernetes', 'nvidia-ml-py', 'grpcio', 'python-dateutil', 'tzdata'):
        assert python[package] == constraints[package], package
    galaxy = dict((c['name'], c['version']) for c in load_yaml(os.path.join(REPO, deps['galaxy']))['collections'])
    assert galaxy == {'kubernetes.core': shipped_collection_version('kubernetes', 'core'),
                      'awx.awx': shipped_collection_version('awx', 'awx')}
    galaxy_yml = load_yaml(os.path.join(REPO, 'galaxy.yml'))
    assert set(galaxy_yml['dependencies']) <= set(galaxy)


def test_ansible_builder_create_offline(tmp_path):
    work = tmp_path / 'ee'
    work.mkdir()
    shutil.copy2(EE_FILE, str(work / 'execution-environment.yml'))
    shutil.copytree(os.path.join(REPO, 'requirements'), str(work / 'requirements'))
    # make ee-context: the collection tarball, then the context. No network (proxies unset, nothing fetched).
    built = run(['ansible-galaxy', 'collection', 'build', '--output-path', str(work / 'build' / 'ee'), REPO], timeout=120)
    assert built.returncode == 0, built.stdout
    context = work / 'context'
    created = run(['ansible-builder', 'create', '-f', str(work / 'execution-environment.yml'), '-c', str(context),
                   '--output-filename', 'Containerfile'], timeout=120)
    assert created.returncode == 0, created.stdout
    assert 'No matches' not in created.stdout, created.stdout

    build = context / '_build'
    assert yaml.safe_load((build / 'requirements.yml').read_text()) == load_yaml(os.path.join(REPO, 'requirements', 'ee-galaxy.yml'))
    assert pins(str(build / 'requirements.txt')) == pins(os.path.join(REPO, 'requirements', 'ee-python.txt'))
    assert 'openssh-clients [platform:rpm]' in (build / 'bindep.txt').read_text()

    version = load_yaml(os.path.join(REPO, 'galaxy.yml'))['version']
    tarball = build / 'gpufleet' / ('gpufleet-mig-%s.tar.gz' % version)
    assert tarball.is_file()
    with tarfile.open(str(tarball)) as archive:
        names = set(archive.getnames())
        manifest = json.load(archive.extractfile('MANIFEST.json'))
    assert (manifest['collection_info']['namespace'], manifest['collection_info']['name']) == ('gpufleet', 'mig')
    for member in ('plugins/filter/awx_rrule.py', 'plugins/modules/nvidia_mig_facts.py', 'roles/mig_layout/tasks/main.yml',
                   'playbooks/mig_layout.yml'):
        assert member in names, member

    containerfile = (context / 'Containerfile').read_text()
    assert 'ARG ANSIBLE_INSTALL_REFS="ansible-core==2.19.14 ansible-runner==2.4.3"' in containerfile
    assert 'ARG PYCMD="/usr/bin/python3.11"' in containerfile
    assert ('RUN ansible-galaxy collection install --no-deps --collections-path /usr/share/ansible/collections '
            '/build/gpufleet/gpufleet-mig-*.tar.gz') in containerfile
    # The collection is installed after the requirements (kubernetes.core, its dependency, first).
    assert containerfile.index('-r requirements.yml --collections-path') < containerfile.index('/build/gpufleet/gpufleet-mig-')
    # The role evicts through kubernetes.core's API calls: the EE downloads no kubectl (nor anything else).
    assert 'kubectl' not in containerfile and 'curl ' not in containerfile
