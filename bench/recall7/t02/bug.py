# OpenMDAO/OpenMDAO @ 157a10944aa62cd88d7cb9566435055106892f8d (master before merge of PR #3097)
# File excerpted: openmdao/core/group.py (Group._setup_iteration_lists), trimmed.
# Stubs: issue_warning, System base class.


def issue_warning(msg):
    ...


class System:
    pass


class Group(System):

    def _setup_iteration_lists(self):
        """
        Set up the iteration lists containing the pre, iterated, and post subsets of systems.

        This should only be called on the top level Group.
        """
        assert self.pathname == '', "call setup_iteration_lists on the top level Group only!"

        if self.nonlinear_solver is not None and self.nonlinear_solver.supports['gradients']:
            issue_warning("The top level group has a nonlinear solver that computes gradients, so "
                          "the entire model will be included in the optimization iteration.")
            return

        # keep track of Groups with nonlinear solvers that use gradients (like Newton). These groups
        # and all systems they contain must be grouped together into the same iteration list.
        grad_groups = []
        always_opt = set()
        for s in self.system_iter(recurse=True, include_self=True):
            if isinstance(s, Group):
                if s.nonlinear_solver is not None and s.nonlinear_solver.supports['gradients']:
                    grad_groups.append(s.pathname)
            elif s.options['always_opt']:
                always_opt.add(s.pathname)

        designvars = self.get_design_vars(recurse=True, get_sizes=False, use_prom_ivc=False)
        responses = self.get_responses(recurse=True, get_sizes=False, use_prom_ivc=False)

        if not designvars or not responses:
            return

        graph = self.get_hybrid_graph()
        response0 = next(iter(responses))  # (simplified; original derives it from the responses dict)

        # loop 'always_opt' components into a response to force them to be in the opt SCC.
        for opt_sys in always_opt:
            graph.add_edge(opt_sys, response0)
            graph.add_edge(response0, opt_sys)

        if grad_groups:
            if self.comm.size > 1:
                grad_groups = self.comm.allgather(grad_groups)
                grad_groups = {g for grp in grad_groups for g in grp}

            remaining = set(grad_groups)
            for name in sorted(grad_groups, key=lambda x: x.count('.')):
                prefix = name + '.'
                match = {n for n in remaining if n.startswith(prefix)}
                remaining -= match

            gradlist = '\n'.join(sorted(remaining))
            issue_warning("The following groups have a nonlinear solver that computes gradients "
                          f"and will be treated as atomic for the purposes of determining "
                          f"which systems are included in the optimization iteration: "
                          f"\n{gradlist}\n")

