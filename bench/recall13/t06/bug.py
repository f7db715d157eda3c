# Excerpt (rewritten) of dymos/trajectory/trajectory.py and dymos/utils/introspection.py
# at OpenMDAO/dymos cce7464c (parent of the squash-merge of PR #731).
import sys

import numpy as np
import openmdao.api as om
from openmdao.utils.mpi import MPI


# ---- dymos/utils/introspection.py ------------------------------------------
def get_promoted_vars(ode, iotypes, metadata_keys=None, get_remote=True):
    """Map promoted names of the IO of a system to their metadata."""
    _iotypes = (iotypes,) if isinstance(iotypes, str) else iotypes
    return {opts['prom_name']: opts for (k, opts) in ode.get_io_metadata(iotypes=_iotypes, get_remote=get_remote,
                                                                         metadata_keys=metadata_keys).items()}


# ---- dymos/trajectory/trajectory.py ----------------------------------------
class Trajectory(om.Group):

    def configure(self):
        """Configure the Trajectory Group."""
        if self.parameter_options:
            self._configure_parameters()

        if self._linkages:
            if MPI:
                self._configure_phase_options_dicts()
            self._configure_linkages()

        if self.comm.rank == 0:
            self._constraint_report(outstream=sys.stdout)

        # promote everything else out of phases
        self.promotes('phases', inputs=['*'], outputs=['*'])

    def _constraint_report(self, outstream=sys.stdout):
        if self.options['sim_mode']:
            return

        float_fmt = '6.4e'
        print(f'\n--- Constraint Report [{self.pathname}] ---')
        indent = '    '

        def _print_constraints(phase, outstream):
            tx = phase.options['transcription']

            ode_outputs = get_promoted_vars(tx._get_ode(phase), 'output')

            ds = {'initial': phase._initial_boundary_constraints,
                  'final': phase._final_boundary_constraints,
                  'path': phase._path_constraints}

            if not (
                    phase._initial_boundary_constraints or phase._final_boundary_constraints or phase._path_constraints):
                print(f'{2 * indent}None', file=outstream)

            for loc, d in ds.items():
                str_loc = f'[{loc}]'
                for expr, options in d.items():
                    _, shape, units, linear = tx._get_boundary_constraint_src(expr, loc, phase, ode_outputs=ode_outputs)

                    equals = options['equals']
                    lower = options['lower']
                    upper = options['upper']
                    str_units = options['units'] or units or 'None'

                    if equals is not None and np.prod(np.asarray(equals).shape) != 1:
                        str_equals = f'array<{"x".join([str(i) for i in np.asarray(equals).shape])}>'
                    elif equals is not None:
                        str_equals = f'{equals:{float_fmt}}'

                    str_lower = f'{lower:{float_fmt}} <=' if lower is not None else ''
                    str_upper = f'<= {upper:{float_fmt}} ' if upper is not None else ''

                    if equals is not None:
                        print(f'{2 * indent}{str_loc:<10s}{str_equals} == {expr} [{str_units}]',
                              file=outstream)
                    else:
                        print(f'{2 * indent}{str_loc:<10s}{str_lower} {expr} {str_upper} [{str_units}]',
                              file=outstream)

        for phase_name, phs in self._phases.items():
            print(f'{indent}--- {phase_name} ---', file=outstream)
            if phs._is_local:
                _print_constraints(phs, outstream)

        print('', file=outstream)
