# Look-alike of https://github.com/helmholtz-analytics/heat/blob/v1.5.1/heat/core/factories.py#L151
# (a false alarm of the blind check on heat 1.5.1), part 1: the sanitizer returns its axis as it
# is when that is None.
# expect: none


def sanitize_axis(shape, axis):
    original_axis = axis
    ndim = len(shape)
    if ndim == 0:
        axis = None
    if axis is not None and not isinstance(axis, int) and not isinstance(axis, tuple):
        raise TypeError("axis must be None or int or tuple, but was %s" % type(axis))
    if isinstance(axis, tuple):
        axis = tuple(d + len(shape) if d < 0 else d for d in axis)
        return axis
    if axis is None or 0 <= axis < len(shape):
        return axis
    elif axis < 0:
        axis += len(shape)
    if axis < 0 or axis >= len(shape):
        raise ValueError("axis %s is out of bounds for %d dimensions" % (original_axis, ndim))
    return axis
