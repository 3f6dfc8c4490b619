# Runs at install time (install(CODE) in packaging/CMakeLists.txt), so that the paths written
# into the systemd unit follow the prefix the files really go to: the configured
# CMAKE_INSTALL_PREFIX, `cmake --install --prefix DIR`, or /usr when cpack builds the .deb.
# Inputs: MESHTRAIN_SOURCE_DIR, MESHTRAIN_WORK_DIR and the configured GNUInstallDirs values
# MESHTRAIN_BINDIR, MESHTRAIN_SYSCONFDIR, MESHTRAIN_DOCDIR (relative to the prefix or absolute).

# An install directory as GNUInstallDirs resolves it, but against the install-time prefix.
function(meshtrain_full_dir out dir kind)
  set(prefix "${CMAKE_INSTALL_PREFIX}")
  string(REGEX REPLACE "(.)/+$" "\\1" prefix "${prefix}")
  if(IS_ABSOLUTE "${dir}")
    set(full "${dir}")
  elseif(kind STREQUAL "SYSCONF" AND (prefix STREQUAL "/" OR prefix STREQUAL "/usr"))
    set(full "/${dir}") # /etc, not /usr/etc
  elseif(kind STREQUAL "SYSCONF" AND prefix MATCHES "^/opt/(.*)")
    set(full "/${dir}/opt/${CMAKE_MATCH_1}")
  elseif(prefix STREQUAL "/")
    set(full "/${dir}")
  else()
    set(full "${prefix}/${dir}")
  endif()
  set(${out} "${full}" PARENT_SCOPE)
endfunction()

meshtrain_full_dir(bindir "${MESHTRAIN_BINDIR}" BIN)
meshtrain_full_dir(confdir "${MESHTRAIN_SYSCONFDIR}" SYSCONF)
meshtrain_full_dir(docdir "${MESHTRAIN_DOCDIR}" DOC)
meshtrain_full_dir(unitdir "lib/systemd/system" UNIT)

set(MESHTRAIN_BIN "${bindir}/meshtrain")
set(MESHTRAIN_ENV_FILE "${confdir}/meshtrain/agent.env")
set(MESHTRAIN_DOC_DIR "${docdir}")
configure_file("${MESHTRAIN_SOURCE_DIR}/packaging/meshtrain-agent.service.in"
               "${MESHTRAIN_WORK_DIR}/meshtrain-agent.service" @ONLY)
file(INSTALL DESTINATION "${unitdir}" TYPE FILE
     FILES "${MESHTRAIN_WORK_DIR}/meshtrain-agent.service")

# The example environment file is the admin's to edit: a re-install from source keeps an
# existing one (dpkg handles the .deb's copy as a conffile).
if(EXISTS "$ENV{DESTDIR}${MESHTRAIN_ENV_FILE}")
  message(STATUS "Keeping existing: $ENV{DESTDIR}${MESHTRAIN_ENV_FILE}")
else()
  file(INSTALL DESTINATION "${confdir}/meshtrain" TYPE FILE
       PERMISSIONS OWNER_READ OWNER_WRITE
       FILES "${MESHTRAIN_SOURCE_DIR}/packaging/agent.env")
endif()
