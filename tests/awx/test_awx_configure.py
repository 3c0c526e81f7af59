# -*- coding: utf-8 -*-
# Copyright: gpufleet.mig contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""playbooks/awx_configure.yml for real, through the awx.awx modules, against a fake AWX API v2 (fake_awx.py)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import datetime
import json
import os

import pytest
import yaml

from ansible_collections.gpufleet.mig.plugins.filter.awx_rrule import awx_rrule

from ..support.playbook import REPO, run_playbook
from .conftest import awx_vars
from .dst import check_wall_clock_across_dst

PLAYBOOK = os.path.join('playbooks', 'awx_configure.yml')
CREDENTIALS = ('GPU hosts - SSH', 'Fleet vault', 'Git - deploy key', 'Registry - pull', 'AWX - controller')
SETTINGS = {
    'awx_project_scm_url': 'https://git.example.com/gpufleet/mig.git',
    'awx_project_scm_branch': 'release-0.1',
    'awx_project_scm_credential': 'Git - deploy key',
    'awx_job_credentials': ['Fleet vault'],
    'awx_execution_environment_credential': 'Registry - pull',
    'awx_controller_credential': 'AWX - controller',
    'awx_schedule_timezone': 'Europe/Berlin',
    'awx_report_job_slice_count': 8,
    'awx_mig_layout_serial': '25%',
    'awx_mig_layout_max_fail_percentage': 25,
}


def configure(tmp_path, url, token, settings, via_env=True, name='vars.yml', extra_args=()):
    """Run awx_configure.yml with extra vars ``settings`` (tests/support/playbook.py, in the environment of the
    ansible_process_env fixture); the connection from the environment or from variables. Returns the PlaybookRun."""
    settings = dict(settings)
    envvars = {}
    if via_env:
        envvars.update(CONTROLLER_HOST=url, CONTROLLER_OAUTH_TOKEN=token)
    else:
        settings.update(awx_controller_host=url, awx_controller_oauthtoken=token)
    path = tmp_path / name
    path.write_text(yaml.safe_dump(settings))
    return run_playbook(PLAYBOOK, args=['-e', '@%s' % path] + list(extra_args), envvars=envvars, project_dir=REPO, timeout=240)


def changed_count(run):
    """How many tasks changed something (the play runs on localhost only)."""
    assert sorted(run.stats) == ['localhost'], run.describe()
    return run.stats['localhost']['changed']


def by_name(fake, collection, name):
    return fake.one(collection, name=name)


def credential_names(fake, collection, obj):
    return [fake.one('credentials', id=cid)['name'] for cid in fake.related(collection, obj['id'], 'credentials')]


@pytest.mark.usefixtures('ansible_process_env')
def test_configure_creates_everything_by_name_then_changes_nothing(fake_awx, tmp_path):
    fake, url = fake_awx
    org = fake.add('organizations', name='Default')
    other = fake.add('organizations', name='Research')
    for name in CREDENTIALS:
        fake.add('credentials', name=name, organization=org['id'])
    defaults = awx_vars()

    first = configure(tmp_path, url, fake.token, SETTINGS)
    assert first.rc == 0, first.describe()
    assert changed_count(first) > 0

    # Referenced, never created: organizations and credentials.
    assert sorted(o['name'] for o in fake.find('organizations')) == ['Default', 'Research']
    assert sorted(c['name'] for c in fake.find('credentials')) == sorted(CREDENTIALS)
    assert ('POST', '/api/v2/credentials/') not in fake.changes()
    assert ('POST', '/api/v2/organizations/') not in fake.changes()

    ee = by_name(fake, 'execution_environments', defaults['awx_execution_environment_name'])
    assert ee['image'] == defaults['awx_execution_environment_image']
    assert ee['organization'] == org['id']
    assert ee['credential'] == by_name(fake, 'credentials', 'Registry - pull')['id']

    project = by_name(fake, 'projects', defaults['awx_project_name'])
    assert (project['scm_type'], project['scm_url'], project['scm_branch']) == (
        'git', SETTINGS['awx_project_scm_url'], SETTINGS['awx_project_scm_branch'])
    assert project['credential'] == by_name(fake, 'credentials', 'Git - deploy key')['id']
    assert project['organization'] == org['id'] != other['id']
    assert project['default_environment'] == ee['id']

    inventory = by_name(fake, 'inventories', defaults['awx_inventory_name'])
    source = by_name(fake, 'inventory_sources', defaults['awx_inventory_source_name'])
    assert (source['source'], source['source_project'], source['inventory']) == ('scm', project['id'], inventory['id'])
    assert source['source_path'] == defaults['awx_inventory_source_path']
    assert os.path.isfile(os.path.join(REPO, source['source_path']))
    assert source['update_on_launch'] is True

    templates = dict((jt['name'], jt) for jt in fake.find('job_templates'))
    assert sorted(templates) == sorted(['MIG layout - daytime', 'MIG layout - nighttime', 'MIG report',
                                        defaults['awx_report_merge_template_name'], defaults['awx_report_cache_template_name'],
                                        defaults['awx_repack_template_name'], defaults['awx_demand_template_name'],
                                        defaults['awx_config_template_name']])
    for jt in templates.values():
        assert (jt['project'], jt['inventory'], jt['organization'], jt['execution_environment']) == (
            project['id'], inventory['id'], org['id'], ee['id'])
        assert os.path.isfile(os.path.join(REPO, jt['playbook'])), jt['playbook']
        # Issue 39: an installed collection gets no ansible.cfg; every job says its forks.
        assert jt['forks'] == defaults['awx_job_forks'] == 10, jt
    for layout in ('daytime', 'nighttime'):
        jt = templates['MIG layout - %s' % layout]
        assert jt['playbook'] == 'playbooks/mig_layout.yml'
        assert json.loads(jt['extra_vars']) == {'mig_layout_name': layout, 'mig_layout_serial': '25%',
                                                'mig_layout_max_fail_percentage': 25}
        assert (jt['job_slice_count'], jt['allow_simultaneous'], jt['use_fact_cache']) == (1, False, True)
        assert credential_names(fake, 'job_templates', jt) == ['GPU hosts - SSH', 'Fleet vault']
    repack = templates[defaults['awx_repack_template_name']]
    assert repack['playbook'] == 'playbooks/mig_repack.yml'
    assert json.loads(repack['extra_vars']) == {
        'mig_layout_serial': '25%', 'mig_layout_max_fail_percentage': 25,
        'mig_layout_repack_fragmentation_above': defaults['awx_repack_fragmentation_above'],
        'mig_layout_repack_stranded_above': defaults['awx_repack_stranded_above']}
    assert (repack['job_slice_count'], repack['allow_simultaneous'], repack['use_fact_cache']) == (1, False, True)
    assert credential_names(fake, 'job_templates', repack) == ['GPU hosts - SSH', 'Fleet vault']
    demand = templates[defaults['awx_demand_template_name']]
    assert demand['playbook'] == 'playbooks/mig_demand.yml'
    assert json.loads(demand['extra_vars']) == {'mig_layout_serial': '25%', 'mig_layout_max_fail_percentage': 25,
                                                'mig_demand_policy': {}}
    assert (demand['job_slice_count'], demand['allow_simultaneous'], demand['use_fact_cache']) == (1, False, True)
    assert credential_names(fake, 'job_templates', demand) == ['GPU hosts - SSH', 'Fleet vault']
    report = templates['MIG report']
    assert (report['playbook'], report['job_slice_count']) == ('playbooks/mig_report.yml', 8)
    assert credential_names(fake, 'job_templates', report) == ['GPU hosts - SSH', 'Fleet vault']
    # Sliced, each slice publishes its hosts; the workflow runs the slices, then always the merge into one fleet map.
    assert json.loads(report['extra_vars']) == {'mig_report_publish': True}
    # Each report leaves its hosts' summaries in AWX's fact storage; the cached map reads them, contacting no host.
    assert report['use_fact_cache'] is True
    cached = templates[defaults['awx_report_cache_template_name']]
    assert (cached['playbook'], cached['job_slice_count'], cached['use_fact_cache'], json.loads(cached['extra_vars'])) == (
        'playbooks/mig_report.yml', 1, True, {'mig_report_source': 'cache'})
    merge = templates[defaults['awx_report_merge_template_name']]
    assert (merge['playbook'], merge['job_slice_count'], json.loads(merge['extra_vars'])) == (
        'playbooks/mig_report.yml', 1, {'mig_report_merge': True})
    workflow = by_name(fake, 'workflow_job_templates', defaults['awx_report_workflow_name'])
    assert workflow['organization'] == org['id']
    nodes = dict((node['identifier'], node) for node in fake.find('workflow_job_template_nodes', workflow_job_template=workflow['id']))
    assert sorted(nodes) == ['fleet-map', 'report-slices']
    assert (nodes['report-slices']['unified_job_template'], nodes['fleet-map']['unified_job_template']) == (report['id'], merge['id'])
    assert fake.related('workflow_job_template_nodes', nodes['report-slices']['id'], 'always_nodes') == [nodes['fleet-map']['id']]
    for relation in ('success_nodes', 'failure_nodes', 'always_nodes'):
        assert fake.related('workflow_job_template_nodes', nodes['fleet-map']['id'], relation) == []
    config = templates[defaults['awx_config_template_name']]
    assert config['playbook'] == 'playbooks/awx_configure.yml'
    assert credential_names(fake, 'job_templates', config) == ['AWX - controller']

    schedules = dict((s['name'], s) for s in fake.find('schedules'))
    repack_schedules = ['%s - schedule %s' % (defaults['awx_repack_template_name'], time) for time in defaults['awx_repack_times']]
    demand_schedules = ['%s - schedule %s' % (defaults['awx_demand_template_name'], time) for time in defaults['awx_demand_times']]
    assert sorted(schedules) == sorted(['MIG layout - daytime - schedule', 'MIG layout - nighttime - schedule'] + repack_schedules
                                       + demand_schedules)
    for names, times, template in ((repack_schedules, defaults['awx_repack_times'], repack),
                                   (demand_schedules, defaults['awx_demand_times'], demand)):
        for name, time in zip(names, times):
            assert schedules[name]['unified_job_template'] == template['id']
            assert schedules[name]['rrule'] == awx_rrule(time, 'Europe/Berlin', [], defaults['awx_schedule_start_date'])
    for switch in defaults['awx_layout_switches']:
        schedule = schedules['MIG layout - %s - schedule' % switch['layout']]
        assert schedule['unified_job_template'] == templates['MIG layout - %s' % switch['layout']]['id']
        assert schedule['enabled'] is True
        # Exactly what the filter makes of the settings, and 08:00 / 20:00 Berlin time around both DST changes.
        assert schedule['rrule'] == awx_rrule(switch['time'], 'Europe/Berlin', [], defaults['awx_schedule_start_date'])
        for change_day in (datetime.date(2026, 3, 29), datetime.date(2026, 10, 25)):
            check_wall_clock_across_dst(schedule['rrule'], 'Europe/Berlin', change_day, switch['time'])

    # No secret reaches the controller's objects.
    assert fake.token not in json.dumps(fake.objects)

    # Second run, the connection from variables this time (-vvv: the token must stay hidden): nothing changes.
    fake.requests[:] = []
    second = configure(tmp_path, url, fake.token, SETTINGS, via_env=False, name='vars2.yml', extra_args=['-vvv'])
    assert second.rc == 0, second.describe()
    assert changed_count(second) == 0, second.describe()
    assert fake.requests and fake.changes() == []
    # Neither in the output nor in any event (module arguments and results).
    assert fake.token not in json.dumps(second.to_dict(raw=True))

    # New York, weekdays only: the schedules (two switches, two repacks, two demand runs) are updated in place, nothing
    # else changes.
    fake.requests[:] = []
    third = configure(tmp_path, url, fake.token, dict(SETTINGS, awx_schedule_timezone='America/New_York',
                                                      awx_schedule_weekdays=['weekdays']), name='vars3.yml')
    assert third.rc == 0, third.describe()
    assert third.changed_tasks('localhost') == ['Schedules of the layout switches', 'Schedules of the repack',
                                                'Schedules of the demand run'], third.describe()
    patched = sorted(path for method, path in fake.changes())
    assert patched == sorted(schedule['url'] for schedule in schedules.values())
    assert len(fake.find('schedules')) == 6
    for name in sorted(schedules):
        rule = fake.one('schedules', name=name)['rrule']
        assert rule.startswith('DTSTART;TZID=America/New_York:'), (name, rule)
        assert rule.endswith('RRULE:FREQ=WEEKLY;INTERVAL=1;BYDAY=MO,TU,WE,TH,FR'), (name, rule)
    for switch in defaults['awx_layout_switches']:
        rule = fake.one('schedules', name='MIG layout - %s - schedule' % switch['layout'])['rrule']
        for change_day in (datetime.date(2026, 3, 8), datetime.date(2026, 11, 1)):
            check_wall_clock_across_dst(rule, 'America/New_York', change_day, switch['time'], weekdays=(0, 1, 2, 3, 4))


@pytest.mark.usefixtures('ansible_process_env')
def test_bad_schedule_settings_fail_before_the_controller_is_contacted(fake_awx, tmp_path):
    fake, url = fake_awx
    result = configure(tmp_path, url, fake.token, {'awx_schedule_timezone': 'Europe/Berln'})
    assert result.rc != 0
    failure = ' '.join(result.messages.get('localhost', []))
    assert "unknown timezone 'Europe/Berln'" in failure and 'did you mean Europe/Berlin' in failure, result.describe()
    assert fake.requests == []


@pytest.mark.usefixtures('ansible_process_env')
def test_missing_organization_is_reported_not_created(fake_awx, tmp_path):
    fake, url = fake_awx
    result = configure(tmp_path, url, fake.token, {'awx_organization': 'GPU platform'})
    assert result.rc != 0
    failure = ' '.join(result.messages.get('localhost', []))
    assert 'The organization GPU platform does not exist on the controller' in failure, result.describe()
    assert fake.changes() == [] and fake.find('organizations') == []
