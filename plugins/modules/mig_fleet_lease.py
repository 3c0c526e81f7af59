#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpufleet.mig contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r'''
---
module: mig_fleet_lease
short_description: Take, renew or release the fleet lease, so that one MIG demand, layout or repack run plans at a time
version_added: 0.3.0
description:
  - Holds a C(coordination.k8s.io/v1) Lease named O(name) in O(namespace) for the run O(holder), as client-go's leader
    election does (C(tools/leaderelection/leaderelection.go)) - a lease held by another run is taken once its record
    stayed unchanged for its C(leaseDurationSeconds) as this module observed it, or once its C(renewTime) is more than
    that duration plus 60 seconds (clock skew) in the past; a run renews its own lease at any time; every write
    carries the read C(resourceVersion), so of two runs racing for it only one gets it.
  - With O(state=present) a lease held by another run is waited for up to O(wait) seconds, read again every
    O(poll_interval) seconds; then the module fails with one line naming the holder and changes nothing.
  - With O(state=absent) the lease is released when O(holder) holds it (holder emptied, duration 1 second, as
    client-go's C(release)); a lease held by another run or missing is left as it is.
  - Runs where the Kubernetes API is reachable (usually the controller), with the C(kubernetes) Python client. The
    connection options are kubernetes.core's (same names, same C(K8S_AUTH_*) environment variables).
options:
  holder:
    description: The identity of this run (an AWX job, or one ansible-playbook run); the same in every play of the run.
    type: str
    required: true
  state:
    description: V(present) takes or renews the lease, V(absent) releases it.
    type: str
    choices: [present, absent]
    default: present
  name:
    description: The Lease's name.
    type: str
    default: gpufleet-mig-fleet
  namespace:
    description: The Lease's namespace (it must exist).
    type: str
    default: default
  lease_duration:
    description: Seconds the lease stays with this run after each renewal; longer than any run that does not renew.
    type: int
    default: 1800
  wait:
    description: Seconds to wait for a lease held by another run before failing; V(0) fails at once.
    type: int
    default: 300
  poll_interval:
    description: Seconds between two reads while waiting.
    type: int
    default: 5
extends_documentation_fragment:
  - gpufleet.mig.k8s_auth
attributes:
  check_mode:
    support: full
    description: The lease is read and the decision reported; nothing is written and nothing waited for.
  diff_mode:
    support: none
    description: Reports no diff.
author:
  - gpufleet.mig developers (@gpufleet)
requirements:
  - kubernetes >= 24.2.0 (Python client)
seealso:
  - name: Leases
    description: Kubernetes documentation of the Lease object and its uses.
    link: https://kubernetes.io/docs/concepts/architecture/leases/
'''

EXAMPLES = r'''
- name: Take the fleet lease for this run (wait up to 5 minutes for another run)
  gpufleet.mig.mig_fleet_lease:
    holder: "awx-job-{{ awx_job_id }}"
    wait: 300

- name: Release it
  gpufleet.mig.mig_fleet_lease:
    holder: "awx-job-{{ awx_job_id }}"
    state: absent
'''

RETURN = r'''
acquired:
  description: This call took the lease (created it, or took it from a run that let it go or expired); false when it renewed its own.
  returned: always
  type: bool
held:
  description: O(holder) holds the lease after the call (V(state=present)), or held it before releasing (V(state=absent)).
  returned: always
  type: bool
holder:
  description: The lease's holder after the call (empty when released or free).
  returned: always
  type: str
waited:
  description: Seconds spent waiting for another run's lease.
  returned: always
  type: float
msg:
  description: In check mode, the line naming the run that holds the lease (also a warning).
  returned: when another run holds the lease in check mode
  type: str
'''

import json
import time

from ansible.module_utils.basic import AnsibleModule, env_fallback, missing_required_lib

# First of the collection's imports: from the module's payload, the others are then compiled once each (_payload_import).
from ansible_collections.gpufleet.mig.plugins.module_utils import _payload_import  # noqa: F401  pylint: disable=unused-import
from ansible_collections.gpufleet.mig.plugins.module_utils.k8s._api_client import KUBERNETES_ERROR, configuration, connection_argument_spec
from ansible_collections.gpufleet.mig.plugins.module_utils.k8s._fleet_lease import LeaseRecord, decide, lease_spec, observe, release_spec

try:
    import urllib3
    from kubernetes import client as k8s_client
    from kubernetes import config as k8s_config
    from kubernetes.client.exceptions import ApiException
except ImportError:
    pass  # KUBERNETES_ERROR says so


class LeaseApi(object):
    """The Lease's reads and writes as plain dicts (the API's JSON)."""

    def __init__(self, api, namespace, name):
        self.api, self.namespace, self.name = api, namespace, name

    def read(self):
        try:
            lease = self.api.read_namespaced_lease(self.name, self.namespace, _preload_content=False)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        return json.loads(lease.data)

    def write(self, record, spec):
        """Create the Lease (``record`` None) or replace it at ``record``'s resourceVersion; False on a conflict."""
        body = {'apiVersion': 'coordination.k8s.io/v1', 'kind': 'Lease',
                'metadata': {'name': self.name, 'namespace': self.namespace}, 'spec': spec}
        try:
            if record is None:
                self.api.create_namespaced_lease(self.namespace, body)
            else:
                body['metadata']['resourceVersion'] = record.resource_version
                self.api.replace_namespaced_lease(self.name, self.namespace, body)
        except ApiException as exc:
            if exc.status == 409:
                return False  # another run created or changed it first (AlreadyExists, Conflict): read again
            raise
        return True


def take(leases, params, check_mode, clock=time.monotonic, wall=time.time, sleep=time.sleep):
    """Take or renew the lease for params['holder']: (the module's result, None), or (None, the one-line message
    naming the holder) once the lease stayed held for params['wait'] seconds. In check mode a held lease is
    reported (held false, the holder, the message) without waiting."""
    me = params['holder']
    started = clock()
    observation = None
    while True:
        record = LeaseRecord.of(leases.read())
        now = clock()
        observation = observe(observation, record, now) if record is not None else None
        decision = decide(record, me, observation, now, wall())
        waited = round(now - started, 1)
        if decision.action == 'wait':
            if check_mode:
                return dict(changed=False, acquired=False, held=False, holder=decision.holder, waited=waited,
                            msg=decision.problem(leases.namespace, leases.name)), None
            if now - started + min(params['poll_interval'], decision.seconds_left) > params['wait']:
                return None, decision.problem(leases.namespace, leases.name)
            sleep(max(0.1, min(params['poll_interval'], decision.seconds_left)))
            continue
        if check_mode:
            return dict(changed=decision.action != 'renew', acquired=decision.action != 'renew', held=True, holder=me,
                        waited=waited), None
        if leases.write(record, lease_spec(decision, me, params['lease_duration'], wall())):
            return dict(changed=True, acquired=decision.action != 'renew', held=True, holder=me, waited=waited), None


def release(leases, params, check_mode, wall=time.time):
    record = LeaseRecord.of(leases.read())
    spec = release_spec(record, params['holder'], wall())
    if spec is None:
        return dict(changed=False, acquired=False, held=False, holder=record.holder if record else '', waited=0.0)
    if not check_mode and not leases.write(record, spec):
        return release(leases, params, check_mode, wall)
    return dict(changed=True, acquired=False, held=True, holder='', waited=0.0)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            holder=dict(type='str', required=True),
            state=dict(type='str', choices=['present', 'absent'], default='present'),
            name=dict(type='str', default='gpufleet-mig-fleet'),
            namespace=dict(type='str', default='default'),
            lease_duration=dict(type='int', default=1800),
            wait=dict(type='int', default=300),
            poll_interval=dict(type='int', default=5),
            **connection_argument_spec(env_fallback)
        ),
        supports_check_mode=True,
    )
    params = module.params
    if KUBERNETES_ERROR:
        module.fail_json(msg=missing_required_lib('kubernetes'), exception=KUBERNETES_ERROR)
    if not params['holder'].strip():
        module.fail_json(msg='holder must name this run, got an empty string')
    for name in ('lease_duration', 'poll_interval'):
        if params[name] < 1:
            module.fail_json(msg='%s must be at least 1 second, got %d' % (name, params[name]))
    if params['wait'] < 0:
        module.fail_json(msg='wait must be 0 or more seconds, got %d' % params['wait'])
    try:
        api = k8s_client.CoordinationV1Api(k8s_client.ApiClient(configuration(params)))
    except (k8s_config.ConfigException, IOError, ValueError) as exc:
        module.fail_json(msg='cannot connect to the Kubernetes API: %s' % exc)
    leases = LeaseApi(api, params['namespace'], params['name'])
    try:
        if params['state'] == 'absent':
            module.exit_json(**release(leases, params, module.check_mode))
        result, problem = take(leases, params, module.check_mode)
    except ApiException as exc:
        module.fail_json(msg='the API server refused the fleet lease %s/%s: HTTP %s %s (the account needs get, create '
                             'and update on coordination.k8s.io leases there)' % (
                                 params['namespace'], params['name'], exc.status, exc.reason))
    except (urllib3.exceptions.HTTPError, EnvironmentError) as exc:
        module.fail_json(msg='cannot reach the API server for the fleet lease %s/%s: %s' % (
            params['namespace'], params['name'], str(exc).splitlines()[0] if str(exc) else type(exc).__name__))
    if problem:
        module.fail_json(msg=problem, held=False, acquired=False, holder='', waited=round(params['wait'], 1))
    if result.get('msg'):
        module.warn(result['msg'])
    module.exit_json(**result)


if __name__ == '__main__':
    main()
