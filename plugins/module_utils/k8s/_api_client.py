# -*- coding: utf-8 -*-
# Copyright: gpufleet.mig contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
#
# Private module utils of gpufleet.mig: the interface may change at any time.

"""The kubernetes Python client's Configuration from kubernetes.core's connection options, for the modules that
call the API server themselves (mig_pod_eviction, mig_fleet_lease). No Ansible imports."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import traceback

try:
    from kubernetes import client as k8s_client
    from kubernetes import config as k8s_config
except ImportError:
    KUBERNETES_ERROR = traceback.format_exc()
else:
    KUBERNETES_ERROR = None


def configuration(params):
    """A client Configuration from kubernetes.core's connection options, resolved as kubernetes.core does
    (kubernetes.core plugins/module_utils/k8s/client.py, _create_configuration)."""
    conf = k8s_client.Configuration()
    kubeconfig, context = params.get('kubeconfig'), params.get('context')
    if params.get('host') and params.get('api_key'):
        pass
    elif kubeconfig or context:
        _load_kubeconfig(kubeconfig, context, conf)
    else:
        try:
            k8s_config.load_incluster_config(client_configuration=conf)
        except k8s_config.ConfigException:
            _load_kubeconfig(None, None, conf)
    if params.get('host'):
        conf.host = params['host'].rstrip('/')
    if params.get('api_key'):
        conf.api_key = {'authorization': 'Bearer %s' % params['api_key']}
    if params.get('ca_cert'):
        conf.ssl_ca_cert = params['ca_cert']
    if params.get('validate_certs') is not None:
        conf.verify_ssl = params['validate_certs']
    return conf


def _load_kubeconfig(kubeconfig, context, conf):
    if isinstance(kubeconfig, dict):
        k8s_config.load_kube_config_from_dict(config_dict=kubeconfig, context=context, client_configuration=conf)
    else:
        k8s_config.load_kube_config(config_file=kubeconfig, context=context, client_configuration=conf)
