# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the host keeps on disk: atomic, hash-compared writes, and the host lock that follows no symlink."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import errno
import os

import pytest

from ansible_collections.gpufleet.mig.plugins.module_utils.host import _host_lock
from ansible_collections.gpufleet.mig.plugins.module_utils.host._host_files import differs, sync
from ansible_collections.gpufleet.mig.plugins.module_utils.host._host_lock import HostLock, LockPermissionDenied, LockTimeout, UnsafeLockPath
from ansible_collections.gpufleet.mig.plugins.module_utils.host._host_files import write_atomically


def test_write_atomically_replaces_and_leaves_no_temp(tmp_path):
    target = str(tmp_path / 'm' / 'x.prom')
    write_atomically(target, 'a\n')
    write_atomically(target, 'b\n')
    assert open(target).read() == 'b\n'
    assert os.listdir(str(tmp_path / 'm')) == ['x.prom']


def test_sync_writes_only_what_differs(tmp_path):
    same = str(tmp_path / 'same')
    other = str(tmp_path / 'sub' / 'other')
    write_atomically(same, 'kept\n')
    before = os.stat(same).st_mtime_ns
    files = [(same, 'kept\n', 0o644), (other, 'new\n', 0o755)]
    assert sync(files, check_mode=True) == [other] and not os.path.exists(other)
    assert sync(files, check_mode=False) == [other]
    assert open(other).read() == 'new\n' and os.stat(other).st_mode & 0o777 == 0o755
    assert os.stat(same).st_mtime_ns == before
    assert sync(files, check_mode=False) == [] and not differs(other, 'new\n') and differs(other, 'newer\n')


def test_lock_folder_is_created_private(tmp_path):
    path = str(tmp_path / 'run' / 'gpufleet-mig' / 'host.lock')
    with HostLock(path, 1):
        assert os.stat(os.path.dirname(path)).st_mode & 0o777 == 0o700
        assert os.stat(path).st_mode & 0o777 == 0o600
        with pytest.raises(LockTimeout, match='gave up after 0 seconds'):
            with HostLock(path, 0):
                pass


def test_lock_refuses_a_symlinked_file_or_folder_and_an_open_folder(tmp_path):
    elsewhere = tmp_path / 'victim'
    elsewhere.write_text('')
    folder = tmp_path / 'lockdir'
    folder.mkdir(mode=0o700)
    (folder / 'host.lock').symlink_to(elsewhere)
    with pytest.raises(UnsafeLockPath, match='symlink'):
        with HostLock(str(folder / 'host.lock'), 1):
            pass
    linked = tmp_path / 'linked'
    linked.symlink_to(folder)
    with pytest.raises(UnsafeLockPath, match='not a folder'):
        with HostLock(str(linked / 'other.lock'), 1):
            pass
    shared = tmp_path / 'shared'
    shared.mkdir()
    os.chmod(str(shared), 0o1777)
    with pytest.raises(UnsafeLockPath, match='writable by nobody else'):
        with HostLock(str(shared / 'host.lock'), 1):
            pass
    assert elsewhere.read_text() == ''


def _denied(*args, **kwargs):
    raise OSError(errno.EACCES, 'Permission denied')


@pytest.mark.parametrize('how', ['root_folder', 'cannot_create_folder', 'cannot_open_file'])
def test_a_user_who_may_not_take_the_lock_is_told_to_run_as_root(tmp_path, monkeypatch, how):
    folder = tmp_path / 'run' / 'gpufleet-mig'
    if how == 'root_folder':
        folder.mkdir(parents=True, mode=0o700)   # root's, as on a real host (the tests run as root)
        monkeypatch.setattr(_host_lock.os, 'geteuid', lambda: 1000)
    elif how == 'cannot_create_folder':
        monkeypatch.setattr(_host_lock.os, 'makedirs', _denied)
    else:
        folder.mkdir(parents=True, mode=0o700)
        monkeypatch.setattr(_host_lock.os, 'open', _denied)
    with pytest.raises(LockPermissionDenied, match='needs root on the managed host.*become: true'):
        with HostLock(str(folder / 'host.lock'), 1):
            pass
