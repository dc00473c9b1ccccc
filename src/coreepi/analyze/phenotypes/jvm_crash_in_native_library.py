"""jvm-crash-in-native-library: the problematic frame of an hs_err log is
native code (``C``) outside the JVM: which library, and the first
non-system library of the stack (the likely culprit when the crash is in
libc)."""

from __future__ import annotations

import re
from typing import Final

from coreepi.analyze.context import AnalysisContext
from coreepi.analyze.phenotypes._jvm import error, hex_or_none, stack, top_frame
from coreepi.analyze.phenotypes.base import PhenotypeRule, register
from coreepi.model.report import Phenotype, RuntimeFrame

_JVM_LIBRARIES: Final = ("libjvm.so", "jvm.dll", "libjvm.dylib", "libjvm.a")
_SYSTEM_LIBRARY: Final = re.compile(
    r"^(?:libc[.-]|libc\.so|libpthread|libdl[.-]|libm[.-]|librt[.-]|ld-linux|ld64|ld\.so|"
    r"libstdc\+\+|"
    r"libgcc_s|libc\+\+|libsystem_|libdyld|ntdll\.dll|kernelbase\.dll|kernel32\.dll|msvcr|msvcp|"
    r"ucrtbase\.dll|vcruntime)",
    re.IGNORECASE,
)
# Native libraries shipped with the JDK itself (the JVM's own, libjvm, aside).
_JDK_LIBRARY: Final = re.compile(
    r"^(?:lib)?(?:java|zip|net|nio|jli|verify|awt\w*|fontmanager|freetype|lcms|mlib_image|jpeg|"
    r"javajpeg|splashscreen|jsound|management\w*|instrument|jdwp|dt_socket|attach|sunec|j2pkcs11|"
    r"j2gss|jaas\w*|"
    r"prefs|sctp|extnet|jimage|rmi|jawt|t2k|saproc|fdlibm|jsig|hprof|npt|unpack)\.(?:so|dll|dylib)$"
)


def _library_of(frame: RuntimeFrame) -> str | None:
    return frame.module if frame.kind == "C" and frame.module else None


def _basename(path: str) -> str:
    return re.split(r"[/\\]", path)[-1]


@register
class JvmCrashInNativeLibrary(PhenotypeRule):
    name = "jvm-crash-in-native-library"
    kinds = frozenset({"jvm"})
    description = (
        "The JVM's problematic frame is native code outside libjvm; evidence: the library, "
        "whether the JDK or the system ships it, and the first non-system library of the stack."
    )

    def evaluate(self, ctx: AnalysisContext) -> Phenotype | None:
        top = top_frame(ctx)
        library = _library_of(top) if top is not None else None
        if top is None or library is None or library.lower().startswith(_JVM_LIBRARIES):
            return None
        info = error(ctx)
        home = info.home if info is not None else None
        paths = {_basename(m.path).lower(): m.path for m in ctx.report.modules}
        path = paths.get(library.lower())
        jdk_library: bool | None = None
        if path and home:
            jdk_library = path.startswith(home.rstrip("/\\") + ("\\" if "\\" in home else "/"))
        elif _JDK_LIBRARY.match(library):
            jdk_library = True
        culprit = next(
            (
                lib
                for f in stack(ctx)
                if (lib := _library_of(f))
                and not _SYSTEM_LIBRARY.match(lib)
                and not lib.lower().startswith(_JVM_LIBRARIES)
            ),
            library,
        )
        return self.fire(
            library=library,
            library_path=path,
            function=top.symbol,
            module_offset=hex_or_none(top.module_offset),
            jdk_library=jdk_library,
            system_library=bool(_SYSTEM_LIBRARY.match(library)),
            culprit_library=culprit,
            problematic_frame=(top.text or "")[:500],
            thread_state=info.thread_state if info is not None else None,
        )
