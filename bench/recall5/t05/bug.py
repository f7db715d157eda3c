# Excerpt in the shape of terrapower/armi at commit 474534b66a2662f3b076a41802ea98618896d971
# (parent of fix 323e949ce, PR #984). Three modules merged; unrelated code dropped.
import os
import shutil
import subprocess

# ---- armi/context.py ----
from mpi4py import MPI

MPI_COMM = MPI.COMM_WORLD
MPI_RANK = MPI_COMM.Get_rank()
MPI_SIZE = MPI_COMM.Get_size()
MPI_DISTRIBUTABLE = MPI_SIZE > 1


def waitAll() -> None:
    """
    If there are parallel processes running, wait for all to catch up to the checkpoint.
    """
    if MPI_SIZE > 1 and MPI_DISTRIBUTABLE:
        MPI_COMM.barrier()


# ---- armi/utils/pathTools.py ----
def cleanPath(path, mpiRank=0):
    """Recursively delete a path (only from one process)."""
    if not os.path.exists(path):
        return True
    if MPI_RANK == mpiRank:
        if os.path.exists(path) and os.path.isdir(path):
            shutil.rmtree(path)
        elif not os.path.isdir(path):
            os.remove(path)
    return not os.path.exists(path)


# ---- armi/utils/outputCache.py ----
def retrieveOutput(exePath, inputPaths, cacheDir, locToRetrieveTo=None):
    """Check the cache for a valid file and copy it if it exists."""
    cachedFolder = _getCachedFolder(exePath, inputPaths, cacheDir)
    if os.path.exists(cachedFolder):
        if locToRetrieveTo is None:
            locToRetrieveTo = os.path.dirname(inputPaths[0])
        successful = _copyOutputs(cachedFolder, locToRetrieveTo)
        if successful:
            return True
        else:
            # outputs didn't match manifest. Just delete to save checking next time.
            try:
                deleteCache(cachedFolder)
            except Exception as e:
                print(e)
    return False


def store(exePath, inputPaths, outputFiles, cacheDir):
    """Store an output file in the cache."""
    outputsThatExist = [outputFile for outputFile in outputFiles if os.path.exists(outputFile)]
    folderLoc = _getCachedFolder(exePath, inputPaths, cacheDir)
    if os.path.exists(folderLoc):
        deleteCache(folderLoc)
    os.makedirs(folderLoc)
    _makeOutputManifest(outputsThatExist, folderLoc)
    for outputFile in outputsThatExist:
        shutil.copy(outputFile, os.path.join(folderLoc, os.path.basename(outputFile)))


def deleteCache(cachedFolder):
    """
    Remove this folder.

    Requires safeword because this is potentially extremely destructive.
    """
    if "Output_Cache" not in cachedFolder:
        raise RuntimeError("Cache location must contain safeword: `Output_Cache`.")

    cleanPath(cachedFolder)
    waitAll()


def cacheCall(cacheDir, executablePath, inputPaths, outputFileNames, execute=None, tearDown=None):
    """Check the cache for outputs of this run, otherwise call the execute command and store."""
    if execute is None:
        execute = lambda: subprocess.call([executablePath] + inputPaths)

    if not cacheDir:
        execute()
        return

    try:
        if retrieveOutput(executablePath, inputPaths, cacheDir):
            return
    except Exception as e:
        print("Outputs existed in cache, but failed to retrieve outputs: {}".format(e))

    execute()
    if tearDown is not None:
        tearDown()

    try:
        store(executablePath, inputPaths, outputFileNames, cacheDir)
    except Exception as e:
        print("Failed to store outputs: {}".format(e))
