# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""_payload_import: the collection's files imported from a zip archive (a module's payload), each compiled once."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import builtins
import collections
import json
import os
import subprocess
import sys
import traceback
import zipfile
import zipimport

import pytest

from ansible_collections.gpufleet.mig.plugins.module_utils import _payload_import

REPOSITORY = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..', '..', '..'))

FILES = {
    '__init__.py': '',
    'sub/__init__.py': 'LEVEL = "package"\n',
    'sub/leaf.py': ('from %(package)s.sub import sibling\n\n'
                    'VALUE = sibling.VALUE + 1\n\n\n'
                    'def fail():\n'
                    '    raise ValueError("from the leaf")  # the line a traceback shows\n'),
    'sub/sibling.py': 'VALUE = 41\n',
}


@pytest.fixture
def archive(tmp_path, request):
    """A zip archive on sys.path holding a package named after the test (so that no two tests share modules);
    what was imported from it and the finders are undone afterwards."""
    package = 'payloadcase_%s' % request.node.name.replace('[', '_').replace(']', '').replace('-', '_')
    path = str(tmp_path / 'payload.zip')
    with zipfile.ZipFile(path, 'w') as handle:
        for name, source in FILES.items():
            handle.writestr('%s/%s' % (package, name), source % {'package': package})
    meta_path = list(sys.meta_path)
    sys.path.insert(0, path)
    yield path, package
    sys.path.remove(path)
    sys.meta_path[:] = meta_path
    for name in [name for name in sys.modules if name == package or name.startswith(package + '.')]:
        del sys.modules[name]
    for entry in [entry for entry in sys.path_importer_cache if entry.startswith(path)]:
        del sys.path_importer_cache[entry]


@pytest.fixture
def compiled(monkeypatch):
    """{file name: times compiled} of what is compiled while the test runs."""
    counted = collections.Counter()
    real = builtins.compile

    def counting(source, filename, *args, **kwargs):
        counted[os.path.basename(os.path.dirname(filename)) + '/' + os.path.basename(filename)] += 1
        return real(source, filename, *args, **kwargs)

    monkeypatch.setattr(builtins, 'compile', counting)
    return counted


def import_leaf(package):
    __import__(package + '.sub.leaf')
    return sys.modules[package + '.sub.leaf']


def test_zipimport_alone_compiles_each_source_twice(archive, compiled):
    """Why the finder exists (python/cpython#141276): zipimporter.get_filename compiles the source for the spec, and
    exec_module compiles it again. Should a Python stop doing so, this goes red, and the finder can go."""
    dummy, package = archive
    assert import_leaf(package).VALUE == 42
    assert compiled['sub/leaf.py'] == 2 and compiled['sub/sibling.py'] == 2


def test_the_finder_compiles_each_source_once(archive, compiled):
    dummy, package = archive
    sys.meta_path.insert(0, _payload_import.ZipSourceFinder(package))
    leaf = import_leaf(package)
    assert leaf.VALUE == 42
    assert sys.modules[package + '.sub'].LEVEL == 'package'
    assert (compiled['sub/leaf.py'], compiled['sub/sibling.py'], compiled['sub/__init__.py']) == (1, 1, 1)
    assert isinstance(leaf.__loader__, _payload_import.OnceCompiledLoader)


def test_a_module_found_by_the_finder_is_the_module_zipimport_would_give(archive):
    """Its file inside the archive, its source back (what _boot_install.boot_code installs on the host), a package's
    path inside the archive, and tracebacks that show its lines."""
    path, package = archive
    sys.meta_path.insert(0, _payload_import.ZipSourceFinder(package))
    leaf = import_leaf(package)
    assert leaf.__file__ == os.path.join(path, package, 'sub', 'leaf.py')
    assert leaf.__loader__.get_source(leaf.__name__) == FILES['sub/leaf.py'] % {'package': package}
    assert sys.modules[package + '.sub'].__path__ == [os.path.join(path, package, 'sub')]
    with pytest.raises(ValueError) as raised:
        leaf.fail()
    assert 'raise ValueError("from the leaf")  # the line a traceback shows' in ''.join(traceback.format_tb(raised.tb))


def test_the_finder_leaves_other_packages_and_missing_modules_to_the_import_system(archive):
    dummy, package = archive
    finder = _payload_import.ZipSourceFinder(package)
    sys.meta_path.insert(0, finder)
    assert finder.find_spec('json', None) is None
    assert finder.find_spec(package + 'x.sub', [archive[0]]) is None
    with pytest.raises(ImportError):
        __import__(package + '.sub.absent')


def test_install_only_for_a_file_loaded_from_a_zip_archive_and_once(archive):
    path, package = archive
    before = list(sys.meta_path)
    assert _payload_import.install(package, loader=_payload_import.__loader__) is False  # the unit tests' folder
    assert sys.meta_path == before
    importer = zipimport.zipimporter(path)
    assert _payload_import.install(package, loader=importer) is True
    assert _payload_import.install(package, loader=importer) is True
    ours = [finder for finder in sys.meta_path if isinstance(finder, _payload_import.ZipSourceFinder)]
    assert len(ours) == 1 and sys.meta_path[0] is ours[0]


_COUNT_COMPILES = r'''
import builtins, collections, json, sys
sys.path.insert(0, sys.argv[1])
counted = collections.Counter()
real = builtins.compile
def counting(source, filename, *args, **kwargs):
    counted[filename.split('.zip/', 1)[-1]] += 1
    return real(source, filename, *args, **kwargs)
builtins.compile = counting
__import__('ansible_collections.gpufleet.mig.plugins.modules.' + sys.argv[2])
print(json.dumps(dict(counted)))
'''


@pytest.mark.parametrize('module', ['nvidia_mig_layout', 'nvidia_mig_facts'])
def test_a_module_imports_the_collection_from_its_payload_compiling_each_file_once(tmp_path, module):
    """The wiring, end to end: the collection's plugins zipped as AnsiballZ lays them out (packages with an
    __init__.py each), the module imported from the archive in a fresh interpreter."""
    payload = str(tmp_path / 'payload.zip')
    collection = 'ansible_collections/gpufleet/mig/'
    with zipfile.ZipFile(payload, 'w') as handle:
        for package in ('ansible_collections', 'ansible_collections/gpufleet', collection[:-1], collection + 'plugins'):
            handle.writestr(package + '/__init__.py', '')
        for root, folders, names in os.walk(os.path.join(REPOSITORY, 'plugins')):
            inside = collection + os.path.relpath(root, REPOSITORY).replace(os.sep, '/')
            if any(name.endswith('.py') for name in names):
                handle.writestr(inside + '/__init__.py', '')
            for name in names:
                if name.endswith('.py'):
                    handle.write(os.path.join(root, name), inside + '/' + name)
    done = subprocess.run([sys.executable, '-c', _COUNT_COMPILES, payload, module], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, universal_newlines=True, check=False, cwd=str(tmp_path))
    assert done.returncode == 0, done.stderr
    counted = json.loads(done.stdout)
    ours = dict((name, times) for name, times in counted.items() if name.startswith(collection + 'plugins/module_utils/'))
    assert len(ours) > 10
    # _payload_import itself and the packages above it come before the finder: zipimport compiles those twice.
    before_the_finder = set(collection + 'plugins/module_utils/' + name for name in ('__init__.py', '_payload_import.py'))
    assert dict((name, times) for name, times in ours.items() if name not in before_the_finder and times != 1) == {}
    assert all(counted[name] == 2 for name in before_the_finder)
