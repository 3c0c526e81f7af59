# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The whole ``diff`` each module returns (_diff_recorder), on one simulated host: the text users see in --diff."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gpufleet.mig.plugins.modules import nvidia_mig_instance, nvidia_mig_layout, nvidia_mig_mode, nvidia_mig_repack

ENABLED = {'current': 'enabled', 'pending': 'enabled'}
OFF = {'current': 'disabled', 'pending': 'disabled'}


def two_gpus(simulated_host):
    """GPU 0: MIG on, a 3g.40gb at 4 (busy: pid 4242) and a 1g.10gb at 0; GPU 1: MIG off."""
    return simulated_host([
        {'model': 'A100-SXM4-80GB', 'mig': dict(ENABLED), 'gpu_instances': [
            {'profile': '3g.40gb', 'start': 4, 'compute_instances': [{'profile': '3g.40gb', 'start': 0, 'pids': [4242]}]},
            {'profile': '1g.10gb', 'start': 0, 'compute_instances': [{'profile': '1g.10gb', 'start': 0}]}]},
        {'model': 'A100-SXM4-80GB', 'mig': dict(OFF)}])


def test_mode_diff_lists_each_gpu_mode(simulated_host, run_module):
    simulated_host([{'model': 'A100-SXM4-80GB', 'mig': dict(OFF)}, {'model': 'A100-SXM4-80GB', 'mig': dict(ENABLED)}])
    result, failed = run_module(nvidia_mig_mode.main, {'gpus': ['all'], 'state': 'enabled', 'allow_reset': True, 'pod_resources': 'off'},
                                check_mode=True, diff=True)
    assert not failed, result
    assert result['diff'] == {'before': 'GPU 0: current=disabled pending=disabled\nGPU 1: current=enabled pending=enabled\n',
                              'after': 'GPU 0: current=enabled pending=enabled\nGPU 1: current=enabled pending=enabled\n'}


def test_instance_diff_lists_each_gpu_instance_and_a_deferred_gpu_note(simulated_host, run_module):
    two_gpus(simulated_host)
    result, failed = run_module(nvidia_mig_instance.main, {'gpus': [0], 'instances': {'3g.40gb': 1, '2g.20gb': 1}, 'pod_resources': 'off'},
                                check_mode=True, diff=True)
    assert not failed, result
    assert result['diff'] == {
        'before': 'GPU 0: 1g.10gb@0 [1g.10gb@0]\nGPU 0: 3g.40gb@4 [3g.40gb@0] busy pids=[4242]\n',
        'after': 'GPU 0: 2g.20gb@0 [2g.20gb@0]\nGPU 0: 3g.40gb@4 [3g.40gb@0] busy pids=[4242]\n'}


def test_layout_diff_lists_mode_and_instances_of_each_gpu(simulated_host, run_module, host_paths):
    two_gpus(simulated_host)
    config = {'night': [{'devices': [0], 'mig-enabled': True, 'mig-devices': {'3g.40gb': 1}},
                        {'devices': [1], 'mig-enabled': True, 'mig-devices': {'3g.40gb': 2}}]}
    result, failed = run_module(nvidia_mig_layout.main, dict(host_paths, name='night', config=config), check_mode=True, diff=True)
    assert not failed, result
    assert result['diff']['before'] == ('GPU 0: MIG current=enabled pending=enabled\n'
                                        'GPU 0: 1g.10gb@0 [1g.10gb@0]\nGPU 0: 3g.40gb@4 [3g.40gb@0] busy pids=[4242]\n'
                                        'GPU 1: MIG current=disabled pending=disabled\nGPU 1: (no instances)\n')
    assert result['diff']['after'] == ('GPU 0: MIG current=enabled pending=enabled\nGPU 0: 3g.40gb@4 [3g.40gb@0] busy pids=[4242]\n'
                                       'GPU 1: MIG current=enabled pending=enabled\nGPU 1: (%s)\n' % result['gpus'][1]['note'])
    assert result['gpus'][1]['note']


def test_repack_diff_lists_only_the_repacked_gpus(simulated_host, run_module):
    simulated_host([
        {'model': 'A100-SXM4-80GB', 'mig': dict(ENABLED), 'gpu_instances': [
            {'profile': '1g.10gb', 'start': 1, 'compute_instances': [{'profile': '1g.10gb', 'start': 0}]},
            {'profile': '1g.10gb', 'start': 5, 'compute_instances': [{'profile': '1g.10gb', 'start': 0}]}]},
        {'model': 'A100-SXM4-80GB', 'mig': dict(ENABLED)}])
    result, failed = run_module(nvidia_mig_repack.main, {'pod_resources': 'off'}, check_mode=True, diff=True)
    assert not failed, result
    assert [g['status'] for g in result['gpus']] == ['repacked', 'below_threshold']
    starts = [gi['placement']['start'] for gi in result['gpus'][0]['after_layout']]
    assert starts != [1, 5]
    assert result['diff'] == {'before': 'GPU 0: 1g.10gb@1 [1g.10gb@0]\nGPU 0: 1g.10gb@5 [1g.10gb@0]\n',
                              'after': ''.join('GPU 0: 1g.10gb@%d [1g.10gb@0]\n' % start for start in starts)}
