import numpy as np

try:
    from mpi4py import MPI
except ImportError:
    MPI = None

from openmdao.utils.units import convert_units


class Driver(object):
    def _get_voi_val(self, name, meta, remote_vois,
                     get_remote=True, rank=None, driver_units=False):
        model = self._problem().model
        comm = model.comm
        get = model._outputs._abs_get_val
        indices = meta['indices']
        src_name = meta['source']

        if name in remote_vois:
            owner, size = remote_vois[name]
            if owner == comm.rank:
                if indices is None:
                    val = get(src_name, flat=True).copy()
                else:
                    val = get(src_name, flat=True)[indices.as_array()]
            else:
                if indices is not None:
                    size = indices.indexed_src_size
                val = np.empty(size)

            if get_remote:
                comm.Bcast(val, root=owner)
        elif indices is None:
            val = get(src_name, flat=True).copy()
        else:
            val = get(src_name, flat=True)[indices.as_array()]

        if driver_units and meta['units'] is not None:
            src_units = model._var_abs2meta['output'][src_name]['units']
            val = convert_units(val, src_units, meta['units'])

        return val


class OptimizerVector(object):
    def __init__(self, voi_type, vecmeta, data):
        self.voi_type = voi_type
        self._meta = vecmeta
        self._data = data

    @classmethod
    def create_from_model(cls, voi_type, driver, driver_scaling=True):
        varmeta_map = {'design_var': driver._designvars,
                       'constraint': driver._cons,
                       'objective': driver._objs}
        remote_vois = {'design_var': driver._remote_dvs,
                       'constraint': driver._remote_cons,
                       'objective': driver._remote_objs}[voi_type]

        vecmeta = {}
        voi_array = []
        idx = 0
        for name, meta in varmeta_map[voi_type].items():
            if meta['discrete']:
                continue
            size = meta['global_size'] if meta['distributed'] else meta['size']
            vecmeta[name] = {'slice': slice(idx, idx + size), 'size': size}

            val = driver._get_voi_val(name, meta, remote_vois,
                                      get_remote=True, driver_units=True)
            voi_array.append(np.atleast_1d(val).flat)
            idx += size

        data = np.concatenate([np.asarray(list(v)) for v in voi_array]) if voi_array else np.zeros(0)
        return cls(voi_type, vecmeta, data)
