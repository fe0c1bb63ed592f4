# Sourced on the GPU machine: unpack our Debian libraries (.deps/*.deb, see
# ../shared/design/GPU-MACHINE.md) into /opt/deps and point the build and
# the loader at them.
if ls .deps/*.deb >/dev/null 2>&1; then
    mkdir -p /opt/deps
    # Once per machine: scripts run side by side must not rewrite the
    # libraries under each other's running binaries.
    if [ ! -f /opt/deps/.unpacked ]; then
        for f in .deps/*.deb; do dpkg -x "$f" /opt/deps || return 1; done
        touch /opt/deps/.unpacked
    fi
    ML=/opt/deps/usr/lib/x86_64-linux-gnu
    # libmicrohttpd.pc names gnutls as a private requirement; the machine has
    # its own libgnutls but no gnutls.pc, and we link dynamically.
    [ -f $ML/pkgconfig/libmicrohttpd.pc ] && sed -i '/^Requires.private:/d' $ML/pkgconfig/libmicrohttpd.pc
    export CMAKE_PREFIX_PATH=/opt/deps/usr PKG_CONFIG_PATH=$ML/pkgconfig
    export LD_LIBRARY_PATH=$ML${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    # The .pc files say prefix=/usr: point the compiler at the unpacked tree too.
    export CPATH=/opt/deps/usr/include${CPATH:+:$CPATH} LIBRARY_PATH=$ML${LIBRARY_PATH:+:$LIBRARY_PATH}
else
    echo "no .deps/*.deb: relying on system libraries"
fi
