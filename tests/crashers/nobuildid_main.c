/* nobuildid_main: calls into nobuildid_lib.c's library, which crashes. */
int lib_entry(int);

int main(void)
{
    return lib_entry(21); /* MAIN-LINE */
}
