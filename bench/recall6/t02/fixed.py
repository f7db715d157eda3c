# onera/Cassiopee @ dee73275c2e528a9300b60208a76d11a7e272bee (the fix, "Converter: bug fix for GH issues #253")
# Excerpt: Cassiopee/Converter/Converter/{PyTree.py, Distributed.py, Mpi4py.py}
# (merged into one file: Distributed.convertFile2SkeletonTree is named Distributed_convertFile2SkeletonTree,
#  Mpi4py.convertFile2PyTree is named convertFile2PyTree_mpi; PyTree.convertFile2PyTree keeps its name)
import os

from mpi4py import MPI

from . import Converter
from . import Internal


# ---- Cassiopee/Converter/Converter/PyTree.py ----
def convertFile2PyTree(fileName, format=None, nptsCurve=20, nptsLine=2,
                       density=-1., skeletonData=None, dataShape=None,
                       links=None, skipTypes=None, uncompress=True,
                       hmax=0.0, hausd=1., grow=0.0, mergeTol=-1, occAlgo=4,
                       oldcompress=False, readMode=0, api=1):
    """Read a file and return a pyTree containing file data."""
    if format is None:
        format = Converter.convertExt2Format__(fileName); autoTry = True
    else: autoTry = False
    exists = os.path.exists(fileName)
    if not exists: raise IOError("convertFile2PyTree: file %s not found."%fileName)

    if format == 'bin_cgns' or format == 'unknown':
        format = Converter.checkFileType(fileName)
    t = Converter.converter.convertFile2PyTree(fileName, format, skeletonData, dataShape, links, skipTypes, readMode)
    t = Internal.createRootNode(children=t[2])
    return t


# ---- Cassiopee/Converter/Converter/Distributed.py ----
def Distributed_convertFile2SkeletonTree(fileName, format=None, maxFloatSize=5,
                                         maxDepth=-1, dataShape=None, links=None):
    """Read a file and return a skeleton tree."""
    return convertFile2PyTree(
        fileName, format, skeletonData=[maxFloatSize,maxDepth],
        dataShape=dataShape, links=links)


# ---- Cassiopee/Converter/Converter/Mpi4py.py ----
COMM_WORLD = MPI.COMM_WORLD
KCOMM = COMM_WORLD

rank = KCOMM.rank
size = KCOMM.size


def _readZones(t, fileName, rank=None): pass
def _convert2PartialTree(t, rank=None): pass


#==============================================================================
# Lecture du squelette d'un arbre dans un fichier
# Lecture proc 0 + bcast
#==============================================================================
def convertFile2SkeletonTree(fileName, format=None, maxFloatSize=5,
                             maxDepth=-1, links=None):
    """Read a file and return a skeleton tree."""
    exists = os.path.exists(fileName)
    if not exists: raise IOError("convertFile2SkeletonTree: file %s not found."%fileName)

    if rank == 0: t = Distributed_convertFile2SkeletonTree(fileName, format, maxFloatSize, maxDepth, None, links)
    else: t = None
    t = KCOMM.bcast(t)
    if links is not None:
        lk = KCOMM.bcast(links)
        if rank > 0: links += lk
    return t

#==============================================================================
# Lecture complete d'un arbre dans un fichier
# si proc=None, lecture proc 0 + bcast
# sinon lecture des zones correspondant a proc
#==============================================================================
def convertFile2PyTree_mpi(fileName, format=None, proc=None):
    """Read a file and return a full tree or partial tree."""
    exists = os.path.exists(fileName)
    if not exists: raise IOError("convertFile2PyTree: file %s not found."%fileName)

    if proc is None: # load full tree on all procs
        if rank == 0: t = convertFile2PyTree(fileName, format)
        else: t = None
        t = KCOMM.bcast(t)
    else:
        t = convertFile2SkeletonTree(fileName, format)
        _readZones(t, fileName, rank=proc)
        _convert2PartialTree(t, rank=proc)
    return t
