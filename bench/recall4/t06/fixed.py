# Excerpt in the shape of firedrakeproject/firedrake pyop2/compilation.py at cd164be9f
# (after "Fix deadlock when the compiler crashes internally (#4913)"). Unrelated code dropped.
import os
import shlex
import subprocess
from pathlib import Path
from random import randint
from tempfile import gettempdir, mkstemp
from textwrap import dedent

from pyop2 import mpi
from pyop2.configuration import configuration
from pyop2.exceptions import CompilationError
from pyop2.logger import INFO, debug, progress

MEM_TMP_DIR = Path(gettempdir()).joinpath("pyop2-tempcache-uid")


@mpi.collective
def make_so(compiler, code, extension, comm):
    """Build a shared library and load it"""
    # Compilation communicators are reference counted on the PyOP2 comm
    icomm = mpi.internal_comm(comm, compiler)
    ccomm = mpi.compilation_comm(icomm, compiler)

    # C or C++
    if extension == "cpp":
        exe = compiler.cxx
        compiler_flags = compiler.cxxflags
    else:
        exe = compiler.cc
        compiler_flags = compiler.cflags

    # Compile on compilation communicator (ccomm) rank 0
    if ccomm.rank == 0:
        # Track exceptions as values so that they may be raised collectively
        try:
            # Adding random 2-digit hexnum avoids using excessive filesystem inodes
            tempdir = MEM_TMP_DIR.joinpath(f"{randint(0, 255):02x}")
            tempdir.mkdir(parents=True, exist_ok=True)
            # This path + filename should be unique
            descriptor, filename = mkstemp(suffix=f".{extension}", dir=tempdir, text=True)
            filename = Path(filename)

            cname = filename
            oname = filename.with_suffix(".o")
            soname = filename.with_suffix(".so")
            logfile = filename.with_suffix(".log")
            errfile = filename.with_suffix(".err")
        except BaseException as e:
            result = e
        else:
            try:
                with progress(INFO, 'Compiling wrapper'):
                    # Write source code to disk
                    with open(cname, "w") as fh:
                        fh.write(code)
                    os.close(descriptor)

                    if not compiler.ld:
                        # Compile and link
                        cc = (exe,) + compiler_flags + ('-o', str(soname), str(cname)) + compiler.ldflags
                        _run(cc, logfile, errfile)
                    else:
                        # Compile
                        cc = (exe,) + compiler_flags + ('-c', '-o', str(oname), str(cname))
                        _run(cc, logfile, errfile)
                        # Link
                        ld = tuple(shlex.split(compiler.ld)) + ('-o', str(soname), str(oname))
                        _run(ld, logfile, errfile, step="Linker", filemode="a")

                result = soname
            except subprocess.CalledProcessError as e:
                msg = dedent(f"""
                    Command "{e.cmd}" return error status {e.returncode}.
                    Unable to compile code
                    Compile log in {logfile!s}
                    Compile errors in {errfile!s}
                """)
                result = CompilationError(msg)
                result.__cause__ = e  # equivalent to 'raise XXX from e'
            except BaseException as e:
                # catch and broadcast all exceptions to prevent deadlocks
                result = e
    else:
        result = None

    result = ccomm.bcast(result)
    if isinstance(result, BaseException):
        raise result
    else:
        return result


def _run(cc, logfile, errfile, step="Compilation", filemode="w"):
    """ Run a compilation command and handle logging + errors.
    """
    debug(f"{step} command: {' '.join(cc)}")
    if configuration['no_fork_available']:
        redirect = ">" if filemode == "w" else ">>"
        cc += (f"2{redirect}", str(errfile), redirect, str(logfile))
        cmd = " ".join(cc)
        status = os.system(cmd)
        if status != 0:
            raise subprocess.CalledProcessError(status, cmd)
    else:
        with open(logfile, filemode) as log, open(errfile, filemode) as err:
            log.write(f"{step} command:\n")
            log.write(" ".join(cc))
            log.write("\n\n")
            subprocess.check_call(cc, stderr=err, stdout=log)
